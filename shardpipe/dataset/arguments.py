"""Checking the arguments of ``ds.shard.to_zarr`` that need no target (before anything is opened).

:func:`check_arguments` is called by :func:`shardpipe.dataset.write.to_zarr`
and, before it creates an Icechunk repository, by ``shardpipe write-dataset``.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any, Unpack

import xarray as xr

from shardpipe.core.checks import check_bool, check_json, check_path, check_progress
from shardpipe.dataset.layout import check_dim_sizes
from shardpipe.dataset.options import DatasetOptions
from shardpipe.errors import InvalidArgumentError
from shardpipe.write.arguments import check_dim_region, check_variable_encoding
from shardpipe.write.options import check_array_options

MODES = ("w-", "w", "a", "r+")
"""Write modes, as in ``xarray.Dataset.to_zarr``."""


@dataclass(frozen=True)
class CheckedArguments:
    """The arguments of :func:`to_zarr` that need no target, checked against the dataset.

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
    """Check what :func:`to_zarr` can check before it looks at the target.

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
    return CheckedArguments(
        mode=mode,
        progress=progress,
        compute=compute,
        consolidated=consolidated,
        chunk_checksums=shared.chunk_checksums,
        strategy=shared.write_strategy,
        budget=shared.max_mem,
        shard_sizes=check_dim_sizes("shards", options.get("shards"), list(ds.dims)),
        chunk_sizes=check_dim_sizes("chunks", options.get("chunks"), list(ds.dims)),
        encoding=_check_encoding(options.get("encoding"), ds),
        group=group,
        region=region,
        append_dim=append_dim,
        storage_options=shared.storage_options,
    )


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
