"""Open a sharded Zarr group with xarray, one Dask chunk per shard.

``xr.open_zarr`` gives a sharded variable Dask chunks of its inner-chunk
shape, so a computation over it has one task per inner chunk (thousands per
shard). Opened here, every variable whose array is sharded gets one Dask
chunk per shard: each task reads one shard object, in one request per inner
chunk it holds.
"""

from __future__ import annotations

import uuid
from collections.abc import Hashable
from typing import Any

import xarray as xr
from zarr.errors import ContainsArrayError

from shardpipe.core.checks import check_path
from shardpipe.errors import InvalidArgumentError
from shardpipe.storage.local.contained import contained
from shardpipe.stored.places import check_store_like


def shard_chunks(ds: xr.Dataset) -> dict[Hashable, dict[Hashable, int]]:
    """Dask chunks per variable that put one shard in each chunk.

    Read from each variable's ``encoding["shards"]`` (set by ``xr.open_zarr``
    for sharded Zarr v3 arrays); variables without shards get their inner
    chunks (``encoding["chunks"]``); in-memory index coordinates are left out.
    """
    chunks: dict[Hashable, dict[Hashable, int]] = {}
    for name, var in ds.variables.items():
        if name in ds.indexes or var.ndim == 0:
            continue
        sizes = var.encoding.get("shards") or var.encoding.get("chunks")
        if sizes is not None:
            chunks[name] = dict(zip(var.dims, (int(s) for s in sizes), strict=True))
    return chunks


def open_dataset(store: Any, *, group: str | None = None, **kwargs: Any) -> xr.Dataset:
    """Open a Zarr group with ``xr.open_zarr``, one Dask chunk per shard of each variable.

    Parameters
    ----------
    store : str, os.PathLike or zarr Store
        What ``xr.open_zarr`` accepts.
    group : str, optional
        Group path inside the store.
    **kwargs
        Passed to ``xr.open_zarr`` (``consolidated``, ``decode_times``,
        ``storage_options``, ...), except ``chunks``.

    Returns
    -------
    xarray.Dataset
        Lazy: each variable's Dask chunks are its shards (see
        :func:`~shardpipe.dataset.open.shard_chunks`).

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        If no group is at ``store`` (and ``group``), or an array is: that
        one opens with :func:`shardpipe.open_array`.
    """
    if "chunks" in kwargs:
        raise InvalidArgumentError(
            "chunks",
            "open_dataset gives every variable one Dask chunk per shard",
            "Call xr.open_zarr(store, chunks=...) for other chunks, or .chunk() afterwards",
        )
    check_store_like("store", store)
    check_path("group", group)
    try:
        ds = xr.open_zarr(contained(store), group=group, chunks=None, **kwargs)
    except ContainsArrayError as err:  # an array where the dataset's group should be
        where = f"{store!r}" + (f", group {group!r}," if group else "")
        raise InvalidArgumentError(
            "group" if group else "store",
            f"{where} holds a Zarr array, not a group of variables",
            f"Open it with shardpipe.open_array({store!r}"
            + (f", path={group!r}" if group else "")
            + ") instead: a Dask array of one block per shard",
        ) from err
    except (FileNotFoundError, KeyError) as err:  # zarr's NodeNotFoundError is one
        raise InvalidArgumentError(
            "group" if group else "store",
            f"no Zarr group at {store!r}" + (f", group {group!r}" if group else "") + f" ({err})",
            "Check the store and group: they must name an existing Zarr group",
        ) from err
    chunks = shard_chunks(ds)
    token = uuid.uuid4().hex[:12]
    variables = {
        name: (var.chunk(chunks[name], name=f"open-{name}-{token}") if name in chunks else var)
        for name, var in ds.variables.items()
    }
    opened = xr.Dataset(
        {name: variables[name] for name in ds.data_vars},
        coords={name: variables[name] for name in ds.coords},
        attrs=ds.attrs,
    )
    opened.encoding = ds.encoding
    return opened
