"""xarray's ``ZarrStore`` that a dataset write into an existing group goes through.

Opened with shardpipe's settings (:func:`xarray_store`), and the region of a
region write found or checked by xarray, its refusals turned into
shardpipe's errors (:func:`region_checked`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import xarray as xr
from xarray.backends.zarr import ZarrStore

from shardpipe.errors import InvalidArgumentError
from shardpipe.storage.resolve import ResolvedStore


def xarray_store(
    root: ResolvedStore, mode: str, append_dim: Any, region: Any, consolidated: bool
) -> ZarrStore:
    """xarray's ``ZarrStore`` on the target group, with its checks of Dask chunks off.

    shardpipe consolidates the metadata itself, at the end. Where the store
    has consolidated metadata, xarray works on it: the group's ``zarr.json``,
    which xarray rewrites with the dataset's attributes, then keeps it, so
    readers that use it see the last complete dataset until the write ends.
    """
    return ZarrStore.open_group(  # type: ignore[no-any-return]
        root.zarr_store_for_writes,
        mode=cast(Any, mode),
        group=root.path or None,
        consolidated=consolidated,
        consolidate_on_close=False,
        append_dim=append_dim,
        write_region=region,
        safe_chunks=False,  # shardpipe writes shards whatever the Dask chunks
        zarr_format=3,
    )


def region_checked(zstore: ZarrStore, ds: xr.Dataset, region: Any, mode: str) -> xr.Dataset:
    """``ds`` with its region found or checked by xarray; its refusals as ours.

    xarray refuses a region that does not fit the stored dataset, and an
    explicit region written with variables that share none of its dimensions
    (coordinates such as ``lat`` and ``lon`` of a region along ``time``), with
    a bare ``ValueError``: here it names the parameter, the variables and the fix.
    With ``mode`` ``"r+"`` (what ``zstore`` was opened with), variables the store
    does not hold are refused too, before xarray would refuse them mid-write.
    """
    if mode == "r+":  # xarray refuses these only once the write has begun
        stored = set(zstore.array_keys())
        if new := sorted(str(name) for name in ds.variables if str(name) not in stored):
            raise InvalidArgumentError(
                "region",
                f"the variables {new} are not in the stored dataset, and a region write "
                "changes only what is stored",
                "Write them first without region (mode='a'), or leave them out: "
                f"ds.drop_vars({new!r})",
            )
    try:
        return zstore._validate_and_autodetect_region(ds)
    except KeyError as err:  # region="auto": coordinate values the store does not hold
        raise InvalidArgumentError(
            "region",
            str(err.args[0] if err.args else err).split("\n")[0].rstrip("."),
            "Write only coordinate values the store holds; add new ones with append_dim",
        ) from err
    except ValueError as err:
        problem = str(err).split("\n")[0].rstrip(".")
        fix = "Write only the variables whose values change in that region"
        if isinstance(region, Mapping):
            dims = sorted(map(str, region))
            outside = [
                str(name)
                for name, variable in ds.variables.items()
                if not set(variable.dims) & set(region)
            ]
            if outside:
                problem = f"the variables {outside} share no dimension with the region's {dims}"
                fix = f"Leave them out first: ds.drop_vars({outside!r})"
        raise InvalidArgumentError("region", problem, fix) from err
