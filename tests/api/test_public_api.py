"""The public API: what ``shardpipe`` exports, old import paths, and names that mean one thing."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import typing
import warnings

import pytest

import shardpipe
from shardpipe._moved import MOVED


def _public_functions() -> list[tuple[str, typing.Any]]:
    return [
        (name, obj)
        for name in shardpipe.__all__
        if inspect.isfunction(obj := getattr(shardpipe, name))
    ]


def _classes_in(annotation: typing.Any) -> set[type]:
    found: set[type] = set()
    if isinstance(annotation, type):
        found.add(annotation)
    for arg in typing.get_args(annotation):
        found |= _classes_in(arg)
    return found


def test_every_type_a_public_function_returns_is_exported() -> None:
    missing = {}
    for name, func in _public_functions():
        returned = typing.get_type_hints(func).get("return")
        for cls in _classes_in(returned):
            if cls.__module__.startswith("shardpipe") and cls.__name__ not in shardpipe.__all__:
                missing.setdefault(name, []).append(cls.__name__)
    assert not missing, missing


def test_every_exported_name_exists_and_errors_are_all_exported() -> None:
    for name in shardpipe.__all__:
        assert hasattr(shardpipe, name), name
    errors = importlib.import_module("shardpipe.errors")
    public_errors = {
        name
        for name, obj in vars(errors).items()
        if isinstance(obj, type) and issubclass(obj, Exception) and not name.startswith("_")
    }
    assert public_errors <= set(shardpipe.__all__), public_errors - set(shardpipe.__all__)


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_import_path_works_with_a_deprecation_warning(old: str) -> None:
    """Every public name of the module(s) an old one went to is found under the old name
    (where its contents went to several, in the first that has it)."""
    news = [importlib.import_module(f"shardpipe.{new}") for new in MOVED[old].split()]
    named = " and ".join(f"shardpipe.{new}" for new in MOVED[old].split())
    with pytest.warns(DeprecationWarning, match=f"shardpipe.{old} moved to {named};"):
        module = importlib.import_module(f"shardpipe.{old}")
    for number, new in enumerate(news):
        public = [n for n in vars(new) if not n.startswith("_")]
        assert public, new.__name__
        for name in public:
            first = next(m for m in news[: number + 1] if hasattr(m, name))
            assert getattr(module, name) is getattr(first, name), (new.__name__, name)


def test_no_package_or_module_is_named_like_a_function_it_exports() -> None:
    clashes = []
    packages = [shardpipe] + [
        importlib.import_module(info.name)
        for info in pkgutil.walk_packages(shardpipe.__path__, "shardpipe.")
        if info.ispkg
    ]
    for package in packages:
        submodules = {info.name for info in pkgutil.iter_modules(package.__path__)}
        functions = {name for name, obj in vars(package).items() if inspect.isfunction(obj)}
        clashes += [f"{package.__name__}.{name}" for name in submodules & functions]
    assert not clashes


def test_the_old_names_that_now_mean_a_function_stay_the_function() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name in ("verify", "migrate", "rechunk", "rechunk_group"):
            assert inspect.isfunction(getattr(shardpipe, name)), name
            assert name not in MOVED


OME_ZARR_NAMES = (
    "to_ome_zarr",
    "prepare_ome_zarr",
    "convert_ome_zarr",
    "prepare_ome_conversion",
    "OmeZarrWrite",
    "OmeZarrReport",
    "OmeZarrConversion",
)


def test_the_ome_zarr_doors_and_what_they_return_are_exported() -> None:
    missing = [name for name in OME_ZARR_NAMES if name not in shardpipe.__all__]
    assert not missing


@pytest.mark.parametrize("door", ["to_ome_zarr", "prepare_ome_zarr"])
def test_the_ome_zarr_doors_take_the_array_options_as_to_sharded_zarr_does(door: str) -> None:
    """The options an image write shares with every array writer: same names, same defaults."""
    array = inspect.signature(shardpipe.to_sharded_zarr).parameters
    image = inspect.signature(getattr(shardpipe, door)).parameters
    shared = {
        "path",
        "shards",
        "chunks",
        "compressors",
        "overwrite",
        "storage_options",
        "max_mem",
        "chunk_checksums",
        "resume",
    }
    assert shared <= set(image), shared - set(image)
    for name in shared:
        assert image[name].default == array[name].default, name
        assert image[name].kind is inspect.Parameter.KEYWORD_ONLY, name
