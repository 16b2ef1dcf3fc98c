"""The work of one shard in a batch of region writes: build each touched chunk, then update.

A batch (:func:`shardpipe.write_regions`) gives each shard it touches one
writer, :func:`update_shard_from_regions`. It reads the shard's index, makes
the new content of every inner chunk a box of the batch touches (as
:func:`~shardpipe.core.region_batch.group_by_shard` says: from one box's
data where one box covers the chunk, else old content or fill value with the
boxes pasted over it in order), encodes those chunks (several at once on idle
cores, :mod:`shardpipe.engine.encoders`) and changes the shard with
:func:`~shardpipe.engine.update_tasks.apply_chunks`: the same strategies,
conditions and undo record as every other update, so a batch is exactly as
crash-safe, shard by shard, as a region write. (It keeps no record of
finished shards for ``resume``: a batch is run again whole.)
"""

from __future__ import annotations

from collections.abc import Buffer, Sequence
from dataclasses import replace

import numpy as np

from shardpipe.core.grid import Box, Coords, box_to_slices, intersect
from shardpipe.core.region_batch import ChunkFill
from shardpipe.engine.encoders import encode_in_order, encoding_task
from shardpipe.engine.reports import WriteReport
from shardpipe.engine.update_tasks import OldShardChunks, UpdateTarget, apply_chunks, read_shard
from shardpipe.storage.retry import retries_so_far


def update_shard_from_regions(
    target: UpdateTarget,
    *,
    shard: Coords,
    key: str,
    fills: Sequence[ChunkFill],
    boxes: Sequence[Box],
    data: Sequence[np.ndarray],
) -> WriteReport:
    """Write the batch's share of shard ``shard`` (at ``key``).

    Parameters
    ----------
    target : UpdateTarget
        The array, the strategy and the job's marker.
    shard : tuple of int
        The shard's grid coordinates.
    key : str
        Its key.
    fills : sequence of ChunkFill
        Its touched inner chunks and the boxes that fill them.
    boxes, data : sequences
        The batch: box ``i`` of the array gets ``data[i]`` (its shape).

    Raises
    ------
    shardpipe.errors.ShardConflictError
        If the shard changed since it was read.
    shardpipe.errors.JobConflictError
        If the job no longer holds the array's marker.
    """
    before = retries_so_far()
    write = target.write
    with encoding_task():
        old = read_shard(write.store, write.shard_format, key, shard=shard)
        olds = OldShardChunks(write, old, frozenset())
        slot_of, codec = write.shard_format.slot, write.codec

        def encode(fill: ChunkFill) -> tuple[int, Buffer | None]:
            chunk = _content(fill, boxes, data, olds, codec.fill_value, codec.dtype)
            return slot_of(fill.local), codec.encode(chunk)

        # every chunk is encoded (old ones read) before apply_chunks changes a byte
        encoded = list(encode_in_order(encode, fills, write.encoders))
        report = apply_chunks(target, key, shard, old, encoded)
    return replace(report, retries=retries_so_far() - before)


def _content(
    fill: ChunkFill,
    boxes: Sequence[Box],
    data: Sequence[np.ndarray],
    olds: OldShardChunks,
    fill_value: object,
    dtype: np.dtype[np.generic],
) -> np.ndarray:
    """The new elements of the chunk ``fill`` describes (its in-array box's shape)."""
    box = fill.box
    origin = [start for start, _ in box]
    first = fill.boxes[0]
    if fill.single:  # one box gives the chunk: a view of its data
        return data[first][box_to_slices(box, [a for a, _ in boxes[first]])]
    shape = tuple(stop - start for start, stop in box)
    if fill.whole:
        chunk = data[first][box_to_slices(box, [a for a, _ in boxes[first]])].copy()
        pasted = fill.boxes[1:]
    else:
        stored = olds.chunk(fill.local)
        if stored is None:
            chunk = np.full(shape, fill_value, dtype=dtype)
        else:
            chunk = np.array(stored[tuple(slice(0, n) for n in shape)], dtype=dtype)
        pasted = fill.boxes
    for position in pasted:
        common = intersect(box, boxes[position])
        assert common is not None  # the box touches the chunk
        at = [a for a, _ in boxes[position]]
        chunk[box_to_slices(common, origin)] = data[position][box_to_slices(common, at)]
    return chunk
