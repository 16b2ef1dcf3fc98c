"""``open_array``: a Zarr array as a Dask array of one block per shard, read by zarr-python.

``da.from_zarr`` gives a sharded array Dask chunks of its inner-chunk shape
(2,560 chunks of 64^3 for a 1 GiB volume of 256^3 shards), so a computation
over it has one task per inner chunk and reads every shard object many
times. Opened here, each block is one shard (or, within ``max_mem``, a box
of whole shards): one task reads one shard object, through zarr-python.
Arrays without shards get one block per chunk. :func:`shardpipe.open_dataset`
does the same for the variables of a dataset.
"""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np
import zarr
from zarr.errors import NodeTypeValidationError

from shardpipe.core.checks import check_path
from shardpipe.core.display import format_nbytes
from shardpipe.core.sizes import shard_multiple_block
from shardpipe.errors import InvalidArgumentError
from shardpipe.storage.resolve import resolve_store
from shardpipe.write.arguments import check_max_mem

__all__ = ["open_array"]


def open_array(
    store: Any,
    path: str | None = None,
    *,
    storage_options: dict[str, Any] | None = None,
    max_mem: int | str | None = None,
) -> da.Array:
    """Open the Zarr array at ``path`` as a Dask array with one block per shard.

    Parameters
    ----------
    store : str, os.PathLike or zarr Store
        A local path, an fsspec URL (``"s3://bucket/x.zarr"``) or a zarr store.
    path : str, optional
        Path of the array inside the store; the store's root by default.
    storage_options : dict, optional
        fsspec options for URLs (``{"client_kwargs": {"endpoint_url": ...}}``
        for an S3-compatible server).
    max_mem : int or str, optional
        None (the default): one block per shard. Else the bytes a block may
        hold (``"1GiB"``): blocks are boxes of whole shards, grown along the
        last axis first, as large as fit; a shard larger than ``max_mem`` is
        refused.

    Returns
    -------
    dask.array.Array
        Lazy; each block reads its shards through zarr-python (one request
        per inner chunk, or per shard index). Arrays without shards have
        one block per chunk.

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        If no Zarr array is at ``path`` (a group names the arrays it holds),
        or a shard is larger than ``max_mem``.
    """
    path = check_path("path", path)
    budget = None if max_mem is None else check_max_mem(max_mem)
    target = resolve_store(store, path, storage_options)
    array = _open(target.zarr_store, target.path, store)
    unit = tuple(int(n) for n in (array.shards or array.chunks))
    itemsize = np.dtype(array.dtype).itemsize
    unit_nbytes = int(np.prod(unit)) * itemsize
    if budget is not None and unit_nbytes > budget:
        raise InvalidArgumentError(
            "max_mem",
            f"a shard of {unit} holds {format_nbytes(unit_nbytes)}, more than "
            f"max_mem={format_nbytes(budget)}",
            "Raise max_mem to a shard's bytes or more, or leave it out (one block per shard)",
        )
    block = shard_multiple_block(tuple(array.shape), unit, itemsize, budget)
    opened: da.Array = da.from_zarr(array, chunks=block if array.ndim else ())
    return opened


def _open(zarr_store: Any, path: str, given: Any) -> zarr.Array[Any]:
    where = f"{given}" + (f", path {path!r}" if path else "")
    try:
        return zarr.open_array(zarr_store, path=path, mode="r")
    except NodeTypeValidationError:
        group = zarr.open_group(zarr_store, path=path, mode="r")
        names = sorted(name for name, _ in group.arrays())
        raise InvalidArgumentError(
            "path",
            f"{where} is a group, not an array",
            f"Pass path= one of its arrays ({', '.join(names) or 'it has none'})",
        ) from None
    except (FileNotFoundError, KeyError) as err:  # zarr's NodeNotFoundError is one
        raise InvalidArgumentError(
            "path" if path else "store",
            f"no Zarr array at {where}",
            "Check the store and path: they must name an existing Zarr array",
        ) from err
