"""Shared parameters: every front door shows, documents and accepts exactly its options."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict, Unpack

import numpy as np
import pytest

import shardpipe
from shardpipe.dataset.accessor import ShardAccessor
from shardpipe.dataset.write import to_zarr as dataset_to_zarr
from shardpipe.rechunking.api import plan_rechunk
from shardpipe.rechunking.group import plan_group_rechunk
from shardpipe.write.parameters import (
    SharedParameters,
    _section,
    options_of,
    parse_entries,
    shares_parameters,
)
from shardpipe.write.prepare import prepare_write

OPTION_DOORS: dict[str, Callable[..., Any]] = {
    "to_sharded_zarr": shardpipe.to_sharded_zarr,
    "prepare_write": prepare_write,
    "rechunk": shardpipe.rechunk,
    "plan_rechunk": plan_rechunk,
    "rechunk_group": shardpipe.rechunk_group,
    "plan_group_rechunk": plan_group_rechunk,
    "to_ome_zarr": shardpipe.to_ome_zarr,
    "prepare_ome_zarr": shardpipe.prepare_ome_zarr,
    "dataset to_zarr": dataset_to_zarr,
    "ds.shard.to_zarr": ShardAccessor.to_zarr,
}
"""The doors that take their options as ``**options: Unpack[...]``."""

DOORS: dict[str, Callable[..., Any]] = {
    **OPTION_DOORS,
    "convert_ome_zarr": shardpipe.convert_ome_zarr,
    "prepare_ome_conversion": shardpipe.prepare_ome_conversion,
    "write_regions": shardpipe.write_regions,
    "RegionBatch": shardpipe.RegionBatch,
    "migrate": shardpipe.migrate,
    "info": shardpipe.info,
    "verify": shardpipe.verify,
    "repair": shardpipe.repair,
    "compact": shardpipe.compact,
    "cleanup": shardpipe.cleanup,
    "open_array": shardpipe.open_array,
    "repair_dataset": shardpipe.repair_dataset,
    "to_neuroglancer_precomputed": shardpipe.to_neuroglancer_precomputed,
    "ShardedWrite.execute": shardpipe.ShardedWrite.execute,
    "RechunkJob.execute": shardpipe.RechunkJob.execute,
    "GroupRechunkJob.execute": shardpipe.GroupRechunkJob.execute,
    "OmeZarrWrite.execute": shardpipe.OmeZarrWrite.execute,
    "OmeZarrConversion.execute": shardpipe.OmeZarrConversion.execute,
}
"""Every public door that takes options: the functions of ``shardpipe.__all__`` and the
``execute`` of the jobs they plan (``open_dataset`` passes its keywords to xarray)."""

OWN_DEFAULTS = {
    "workers": {"compact": 4},  # each of compact's workers holds a whole shard in memory
    "max_mem": {"open_array": None},  # a read's block size: None is one block per shard
    "encoding": {"to_neuroglancer_precomputed": "raw"},  # a chunk encoding, not xarray's
}
"""Options that a door takes with a default of its own (documented by its own entry); every
other door that takes them has the shared default."""


def _documented(func: Callable[..., Any]) -> list[str]:
    lines = inspect.cleandoc(func.__doc__ or "").splitlines()
    section = _section(lines, "Parameters")
    assert section is not None
    return list(parse_entries(lines[section[0] : section[1]], func.__qualname__))


@pytest.mark.parametrize("door", DOORS.values(), ids=DOORS.keys())
def test_the_docstring_lists_the_signature_in_order(door: Callable[..., Any]) -> None:
    signature = [n for n in inspect.signature(door).parameters if n != "self"]
    assert _documented(door) == signature


@pytest.mark.parametrize("door", OPTION_DOORS.values(), ids=OPTION_DOORS.keys())
def test_every_option_is_a_keyword_with_its_default(door: Callable[..., Any]) -> None:
    options = options_of(inspect.unwrap(door))
    assert options, "a door decorated with shares_parameters takes **options: Unpack[...]"
    parameters = inspect.signature(door).parameters
    for name in options:
        assert parameters[name].kind is inspect.Parameter.KEYWORD_ONLY, name
        assert parameters[name].default is not inspect.Parameter.empty, name


def test_the_array_doors_agree_on_defaults() -> None:
    """One option, one default, whichever door a user goes through."""
    seen: dict[str, dict[str, object]] = {}
    for door_name, door in DOORS.items():
        for name, parameter in inspect.signature(door).parameters.items():
            if parameter.kind is inspect.Parameter.KEYWORD_ONLY:
                if door_name not in OWN_DEFAULTS.get(name, {}):
                    seen.setdefault(name, {})[door_name] = parameter.default
                else:
                    assert parameter.default == OWN_DEFAULTS[name][door_name]
    differing = {
        name: defaults
        for name, defaults in seen.items()
        if len({repr(d) for d in defaults.values()}) > 1
    }
    assert differing == {}


@pytest.mark.parametrize("name", ["to_sharded_zarr", "rechunk"])
def test_a_misspelt_keyword_is_a_type_error_before_anything_is_written(
    tmp_path: Path, name: str
) -> None:
    door = DOORS[name]
    source = np.zeros((4, 4), "u1")
    if name == "rechunk":
        shardpipe.to_sharded_zarr(source, tmp_path / "src.zarr")
        first: Any = str(tmp_path / "src.zarr")
    else:
        first = source
    with pytest.raises(TypeError, match="unexpected keyword argument 'shard'"):
        door(first, str(tmp_path / "out.zarr"), shard=(4, 4))
    assert not (tmp_path / "out.zarr").exists()


SHARED = SharedParameters(
    """
    level : int
        How hard to try.
    name : str
        What to call it.
    """,
    {"level": 3, "name": "x"},
)


class _Options(TypedDict, total=False):
    level: int


class _Unknown(TypedDict, total=False):
    speed: int


def test_a_door_documents_its_own_parameters_and_gets_the_shared_ones() -> None:
    @shares_parameters(SHARED)
    def door(value: int, **options: Unpack[_Options]) -> dict[str, Any]:
        """Do it.

        Parameters
        ----------
        value : int
            The value.
        """
        return dict(options)

    assert str(inspect.signature(door)).startswith("(value: int, *, level: int = 3) -> ")
    assert _documented(door) == ["value", "level"]
    assert "level : int, default 3" in (door.__doc__ or "")
    assert door(1, level=5) == {"level": 5}
    with pytest.raises(TypeError, match="'name'"):
        door(1, name="y")  # shared, but not taken by this door


def test_a_parameter_documented_nowhere_fails_at_import() -> None:
    with pytest.raises(TypeError, match="'other' is documented nowhere"):

        @shares_parameters(SHARED)
        def door(other: int, **options: Unpack[_Options]) -> None:
            """Do it.

            Parameters
            ----------
            """


def test_an_entry_for_no_parameter_fails_at_import() -> None:
    with pytest.raises(TypeError, match=r"documents \['gone'\], which it does not take"):

        @shares_parameters(SHARED)
        def door(**options: Unpack[_Options]) -> None:
            """Do it.

            Parameters
            ----------
            gone : int
                Not a parameter any more.
            """


def test_an_option_without_a_shared_default_fails_at_import() -> None:
    with pytest.raises(TypeError, match=r"options \['speed'\] have no shared default"):

        @shares_parameters(SHARED)
        def door(**options: Unpack[_Unknown]) -> None:
            """Do it.

            Parameters
            ----------
            """


def test_a_parameter_taking_a_shared_entry_with_another_default_fails_at_import() -> None:
    with pytest.raises(TypeError, match=r"level=4, but its shared default is 3"):

        @shares_parameters(SHARED)
        def door(*, level: int = 4) -> None:
            """Do it.

            Parameters
            ----------
            """


def test_a_parameter_with_its_own_entry_keeps_its_own_default() -> None:
    @shares_parameters(SHARED)
    def door(*, level: int = 4, name: str = "x") -> None:
        """Do it.

        Parameters
        ----------
        level : int
            How hard to try here (harder).
        """

    assert str(inspect.signature(door)) == "(*, level: int = 4, name: str = 'x') -> None"
    assert "How hard to try here (harder)." in (door.__doc__ or "")
    assert 'name : str, default "x"' in (door.__doc__ or "")


def test_a_class_gets_the_entries_of_its_init_in_its_docstring() -> None:
    @shares_parameters(SHARED)
    class Door:
        """Hold it.

        Parameters
        ----------
        value : int
            The value.
        """

        def __init__(self, value: int, *, name: str = "x") -> None:
            self.value, self.name = value, name

    assert _documented(Door) == ["value", "name"]
    assert Door(1, name="y").name == "y"
