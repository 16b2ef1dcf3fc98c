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

from shardpipe import advice
from shardpipe.core.checks import MAX_DASK_BLOCKS, check_path, dask_block_count
from shardpipe.core.display import format_nbytes
from shardpipe.core.sizes import shard_multiple_block
from shardpipe.errors import InvalidArgumentError, ShardpipeError
from shardpipe.storage.resolve import ResolvedStore, resolve_store
from shardpipe.stored.metadata import (
    ZARR_PARSE_ERRORS,
    broken_metadata,
    check_array_size,
    read_node_metadata,
    unreadable_metadata,
)
from shardpipe.write.arguments import check_max_mem
from shardpipe.write.options import STORED_PARAMETERS
from shardpipe.write.parameters import shares_parameters

__all__ = ["open_array"]


@shares_parameters(STORED_PARAMETERS)
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
        a shard is larger than ``max_mem``, or the array would be more than
        :data:`~shardpipe.core.checks.MAX_DASK_BLOCKS` Dask blocks.
    shardpipe.errors.MetadataError
        If its ``zarr.json`` is broken or declares what no array can be
        (the checks of :func:`~shardpipe.stored.metadata.parse_node_metadata`,
        and more elements or bytes than NumPy and Dask index), naming the
        key, the value and the fix; checked before anything is built.
    """
    path = check_path("path", path)
    budget = None if max_mem is None else check_max_mem(max_mem)
    target = resolve_store(store, path, storage_options)
    where = f"{store}" + (f", path {path!r}" if path else "")
    checked = read_node_metadata(target.shards, target.key("zarr.json"))  # Zarr v3, or None
    array = _open(target, where, "path" if path else "store")
    check_array_size(array.metadata, target.key("zarr.json" if checked else ".zarray"))
    unit = tuple(int(n) for n in (array.shards or array.chunks))
    itemsize = np.dtype(array.dtype).itemsize
    unit_nbytes = int(np.prod(unit)) * itemsize
    if budget is not None and unit_nbytes > budget:
        raise InvalidArgumentError(
            "max_mem",
            f"a shard of {unit} holds {format_nbytes(unit_nbytes)}, more than "
            + advice.valued("max_mem", format_nbytes(budget)),
            f"Raise {advice.name('max_mem')} to a shard's bytes or more, or leave it out (one "
            "block per shard)",
        )
    shape = tuple(int(n) for n in array.shape)
    block = shard_multiple_block(shape, unit, itemsize, budget)
    blocks = dask_block_count(shape, block)
    if blocks > MAX_DASK_BLOCKS:
        raise InvalidArgumentError(
            "max_mem",
            f"the array at {where}, of shape {shape}, would be {blocks:,} Dask blocks of "
            f"{block}, more than the {MAX_DASK_BLOCKS:,} shardpipe opens",
            f"Pass a larger {advice.name('max_mem')}, for blocks of many shards, "
            "or read parts of it with zarr.open_array(...)[...]",
        )
    opened: da.Array = da.from_zarr(array, chunks=block if array.ndim else ())
    return opened


def _open(target: ResolvedStore, where: str, parameter: str) -> zarr.Array[Any]:
    try:
        return zarr.open_array(target.zarr_store, path=target.path, mode="r")
    except NodeTypeValidationError:
        group = zarr.open_group(target.zarr_store, path=target.path, mode="r")
        try:
            names = sorted(name for name, _ in group.arrays())
        except (FileNotFoundError, ShardpipeError):
            raise
        except ZARR_PARSE_ERRORS as err:  # an array of the group has metadata zarr cannot read
            raise broken_metadata(target.shards, target.key(""), err) from err
        raise InvalidArgumentError(
            "path",
            f"{where} is a group, not an array",
            f"Pass path= one of its arrays ({', '.join(names) or 'it has none'})",
        ) from None
    except (FileNotFoundError, KeyError) as err:  # zarr's NodeNotFoundError is one
        raise InvalidArgumentError(
            parameter,
            f"no Zarr array at {where}",
            "Check the store and path: they must name an existing Zarr array",
        ) from err
    except ZARR_PARSE_ERRORS as err:  # a Zarr v2 array (its zarr.json was checked before)
        raise unreadable_metadata(where, err) from err
