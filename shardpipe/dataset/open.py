"""Open a sharded Zarr group with xarray, one Dask chunk per shard.

``xr.open_zarr`` gives a sharded variable Dask chunks of its inner-chunk
shape, so a computation over it has one task per inner chunk (thousands per
shard). Opened here, every variable whose array is sharded gets one Dask
chunk per shard: each task reads one shard object, in one request per inner
chunk it holds.
"""

from __future__ import annotations

import uuid
from collections.abc import Hashable, Mapping
from typing import Any

import xarray as xr
from zarr.abc.store import Store
from zarr.errors import ContainsArrayError

from shardpipe.core.checks import MAX_DASK_BLOCKS, check_path, dask_block_count
from shardpipe.errors import InvalidArgumentError, ShardpipeError
from shardpipe.internals.zarr_core import ArrayV3Metadata
from shardpipe.storage.local.contained import contained
from shardpipe.storage.resolve import resolve_store
from shardpipe.stored.metadata import (
    ZARR_PARSE_ERRORS,
    check_array_size,
    read_group_members,
    unreadable_metadata,
)
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
        If no Zarr group is there (an array is: that one opens with
        :func:`shardpipe.open_array`), or a variable would be more than
        :data:`~shardpipe.core.checks.MAX_DASK_BLOCKS` Dask chunks.
    shardpipe.errors.MetadataError
        If the ``zarr.json`` of the group or of a node in it is broken or
        declares what no array can be, as :func:`shardpipe.open_array`
        refuses it; checked before xarray opens the group.
    """
    if "chunks" in kwargs:
        raise InvalidArgumentError(
            "chunks",
            "open_dataset gives every variable one Dask chunk per shard",
            "Call xr.open_zarr(store, chunks=...) for other chunks, or .chunk() afterwards",
        )
    check_store_like("store", store)
    check_path("group", group)
    where = f"{store!r}" + (f", group {group!r}" if group else "")
    _check_members(store, group, kwargs.get("storage_options"))
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
            f"no Zarr group at {where} ({err})",
            "Check the store and group: they must name an existing Zarr group",
        ) from err
    except ShardpipeError:
        raise
    except ZARR_PARSE_ERRORS as err:  # a Zarr v2 node, or a store not read above
        raise unreadable_metadata(where, err) from err
    chunks = shard_chunks(ds)
    _check_blocks(ds, chunks, where, "group" if group else "store")
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


def _check_members(store: Any, group: str | None, storage_options: Any) -> None:
    """Check the ``zarr.json`` of the group and of each node in it, as ``open_array`` does.

    A mapping that is no zarr store is left to xarray.
    """
    if isinstance(store, Mapping) and not isinstance(store, Store):
        return
    root = resolve_store(store, group, storage_options)
    for key, node in read_group_members(root).items():
        if isinstance(node, ArrayV3Metadata):
            check_array_size(node, key)


def _check_blocks(
    ds: xr.Dataset, chunks: dict[Hashable, dict[Hashable, int]], where: str, parameter: str
) -> None:
    """Refuse a variable that would be more Dask chunks than shardpipe opens."""
    for name, sizes in chunks.items():
        shape = tuple(int(n) for n in ds.variables[name].shape)
        block = tuple(sizes.values())
        count = dask_block_count(shape, block)
        if count > MAX_DASK_BLOCKS:
            raise InvalidArgumentError(
                parameter,
                f"variable {name!r} of {where}, of shape {shape}, would be {count:,} Dask "
                f"chunks of {block}, more than the {MAX_DASK_BLOCKS:,} shardpipe opens",
                "Open it with xr.open_zarr(store, chunks=None) and select a part before .chunk()",
            )
