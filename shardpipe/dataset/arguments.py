"""Checking the arguments of ``ds.shard.to_zarr`` that need no target (before anything is opened).

:func:`check_arguments` is called by :func:`shardpipe.dataset.write.to_zarr`
and, before it creates an Icechunk repository, by ``shardpipe write-dataset``.
The dataset's ``region`` and its variables' ``encoding`` are checked here too
(:func:`check_dim_region`, :func:`check_variable_encoding`).
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Mapping
from dataclasses import dataclass
from typing import Any, Unpack

import xarray as xr

from shardpipe.codec.names import codec_specs
from shardpipe.core.checks import (
    check_bool,
    check_dtype,
    check_entry_keys,
    check_json,
    check_path,
    check_progress,
    checking_entry,
    is_integer,
    shown,
)
from shardpipe.dataset.layout import check_dim_sizes
from shardpipe.dataset.options import DatasetOptions
from shardpipe.errors import InvalidArgumentError
from shardpipe.write.options import check_array_options

MODES = ("w-", "w", "a", "r+")
"""Write modes, as in ``xarray.Dataset.to_zarr``."""


@dataclass(frozen=True)
class CheckedArguments:
    """The arguments of ``to_zarr`` that need no target, checked against the dataset.

    :func:`~shardpipe.dataset.write.to_zarr` checks them before it looks at the target.

    ``region``, ``append_dim`` and ``storage_options`` are as given (xarray
    and the target check them further).
    """

    mode: str
    progress: bool
    compute: bool
    consolidated: bool
    chunk_checksums: bool
    strategy: str
    budget: int
    shard_sizes: dict[Hashable, int]
    chunk_sizes: dict[Hashable, int]
    encoding: dict[Hashable, dict[str, Any]]
    group: str | None
    region: Any
    append_dim: Hashable | None
    storage_options: Any


def check_arguments(
    ds: xr.Dataset,
    *,
    compute: bool = True,
    progress: bool = False,
    **options: Unpack[DatasetOptions],
) -> CheckedArguments:
    """Check what :func:`~shardpipe.dataset.write.to_zarr` can check before it looks at the target.

    The command line calls it before it creates an Icechunk repository.

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        Naming the first argument refused.
    """
    append_dim, region = options.get("append_dim"), options.get("region")
    mode = _check_mode(options.get("mode"), append_dim, region)
    if mode != "r+":  # xarray writes the attributes (not in region writes)
        _check_attributes(ds)
    check_dim_region(region, ds.dims)
    group = check_path("group", options.get("group"))
    progress, compute = check_progress(progress, compute)
    if append_dim is not None and append_dim not in ds.dims:
        raise InvalidArgumentError(
            "append_dim",
            f"{append_dim!r} is not a dimension of the dataset (it has {list(ds.dims)})",
            "Name the dimension to append along",
        )
    consolidated = check_bool("consolidated", options.get("consolidated", True))
    # write_strategy, chunk_checksums, max_mem as every front door checks them (the
    # dataset's shards, chunks, region and append_dim name dimensions: not checked there)
    shared = check_array_options(options)
    dims = list(ds.dims)
    return CheckedArguments(
        mode=mode,
        progress=progress,
        compute=compute,
        consolidated=consolidated,
        chunk_checksums=shared.chunk_checksums,
        strategy=shared.write_strategy,
        budget=shared.max_mem,
        shard_sizes=check_dim_sizes("shards", _by_name("shards", options.get("shards"), ds), dims),
        chunk_sizes=check_dim_sizes("chunks", _by_name("chunks", options.get("chunks"), ds), dims),
        encoding=_check_encoding(options.get("encoding"), ds),
        group=group,
        region=region,
        append_dim=append_dim,
        storage_options=shared.storage_options,
    )


def _by_name(parameter: str, sizes: Any, ds: xr.Dataset) -> Any:
    """``shards``/``chunks`` as given, or by dimension name from a tuple; ``"auto"``: None.

    A tuple (or list) gives one size per dimension of the dataset, in the
    order of ``ds.sizes``, as xarray reads a tuple of Dask chunks
    (``dict(zip(ds.dims, sizes))``).
    """
    if isinstance(sizes, str) and sizes == "auto":
        return None
    if not isinstance(sizes, tuple | list):
        return sizes
    dims = tuple(ds.sizes)
    if len(sizes) != len(dims):
        raise InvalidArgumentError(
            parameter,
            f"{tuple(sizes)!r} has {len(sizes)} size(s) for the {len(dims)} dimensions "
            f"{dims} of the dataset (a tuple follows the order of ds.sizes)",
            f"Give one size per dimension (-1 for a whole one), or a dict by dimension name, "
            f"e.g. {parameter}={dict.fromkeys(dims, -1)}",
        )
    return dict(zip(dims, sizes, strict=True))


def _check_attributes(ds: xr.Dataset) -> None:
    """Refuse attributes of the dataset or of a variable that strict JSON cannot hold."""
    check_json("obj", ds.attrs, "obj.attrs")
    for name, var in ds.variables.items():
        check_json("obj", var.attrs, f"obj[{name!r}].attrs")


def _check_mode(mode: Any, append_dim: Any, region: Any) -> str:
    if mode is None:
        mode = "a" if append_dim is not None else "r+" if region is not None else "w-"
    if mode not in MODES:
        raise InvalidArgumentError(
            "mode", f"unknown value {mode!r}", f"Use one of {', '.join(map(repr, MODES))}"
        )
    if append_dim is not None and region is not None:
        raise InvalidArgumentError(
            "region", "region and append_dim were both given", "Pass one of them"
        )
    if append_dim is not None and mode != "a":
        raise InvalidArgumentError(
            "mode", f"{mode!r} cannot append (append_dim={append_dim!r})", "Use mode='a'"
        )
    if region is not None and mode not in ("a", "r+"):
        raise InvalidArgumentError(
            "mode", f"{mode!r} cannot write a region", "Use mode='r+' (or 'a')"
        )
    return str(mode)


def _check_encoding(
    encoding: Mapping[Hashable, Mapping[str, Any]] | None, ds: xr.Dataset
) -> dict[Hashable, dict[str, Any]]:
    if encoding is None:
        return {}
    if not isinstance(encoding, Mapping):
        raise InvalidArgumentError(
            "encoding",
            f"expected a dict of variable name to encoding dict, got {encoding!r}",
            'Pass e.g. encoding={"t2m": {"dtype": "int16", "scale_factor": 0.01}}',
        )
    unknown = [name for name in encoding if name not in ds.variables]
    if unknown:
        raise InvalidArgumentError(
            "encoding",
            f"names variable(s) {unknown} that the dataset lacks",
            f"Give encodings for variables of the dataset ({list(ds.variables)})",
        )
    return {name: check_variable_encoding(name, value) for name, value in encoding.items()}


def check_dim_region(region: Any, dims: Collection[Hashable]) -> None:
    """Check a dataset's ``region``: ``"auto"``, or a dict of dimension name to slice."""
    if region is None or (isinstance(region, str) and region == "auto"):
        return
    example = 'Pass e.g. region={"time": slice(0, 365)}, or region="auto"'
    if not isinstance(region, Mapping):
        raise InvalidArgumentError(
            "region", f"expected a dict of dimension name to slice, got {shown(region)}", example
        )
    unknown = [d for d in region if d not in dims]
    if unknown:
        raise InvalidArgumentError(
            "region",
            f"names dimension(s) {unknown} that the dataset lacks (it has {list(dims)})",
            "Name only dimensions of the dataset",
        )
    for dim, where in region.items():
        if isinstance(where, str) and where == "auto":
            continue
        bounds = (where.start, where.stop) if isinstance(where, slice) else ()
        if (
            not isinstance(where, slice)
            or where.step not in (None, 1)
            or not all(b is None or is_integer(b) for b in bounds)
        ):
            raise InvalidArgumentError(
                "region",
                f"{where!r} for dimension {dim!r} is not a slice with integer bounds and step 1",
                example,
            )


ENCODING_KEYS = frozenset(
    {
        # CF, applied by xarray
        "dtype",
        "scale_factor",
        "add_offset",
        "_FillValue",
        "missing_value",
        "units",
        "calendar",
        "_Unsigned",
        "coordinates",
        # zarr, as xarray's zarr backend accepts them (and the keys it drops)
        "chunks",
        "shards",
        "compressors",
        "filters",
        "serializer",
        "fill_value",
        "write_empty_chunks",
        "cache_metadata",
        "chunk_key_encoding",
        "preferred_chunks",
        "source",
        "original_shape",
    }
)
"""Keys of one variable's ``encoding`` that the dataset writer accepts."""


def check_variable_encoding(name: Hashable, encoding: Any) -> dict[str, Any]:
    """Check the ``encoding`` of one dataset variable: a dict of known keys and a valid dtype."""
    if not isinstance(encoding, Mapping):
        raise InvalidArgumentError(
            "encoding",
            f"variable {name!r}: expected a dict, got {shown(encoding)}",
            'Pass e.g. encoding={"t2m": {"dtype": "int16", "scale_factor": 0.01}}',
        )
    entry = f"variable {name!r}"
    check_entry_keys("encoding", entry, encoding, ENCODING_KEYS, "CF or zarr encoding keys")
    checked = dict(encoding)
    with checking_entry("encoding", entry):
        if "dtype" in encoding:
            check_dtype("dtype", encoding["dtype"])
        for key in ("compressors", "filters", "serializer"):  # names and short dicts, as zarr's
            if key in checked:
                checked[key] = codec_specs(key, checked[key])
    for key in ("shards", "chunks"):  # zarr's "auto": shardpipe's default (None: unsharded)
        if isinstance(checked.get(key), str) and checked[key] == "auto":
            del checked[key]
    return checked
