"""The task of a precomputed write: gather a shard's chunks from the blocks, publish the file.

Each chunk is assembled once, straight into a Fortran-ordered buffer (x
varying fastest, as the ``raw`` encoding stores it: that buffer is then
the chunk's bytes, with no other copy), from the source blocks that
overlap it, then encoded (:mod:`shardpipe.formats.precomputed_chunks`).
One task writes each shard file in one atomic ``put`` of the storage
backend; it holds the shard's chunks (and the blocks it was given) while
it runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from shardpipe.core.grid import Box, intersect
from shardpipe.core.precomputed_plan import ScaleGrid, ShardChunks
from shardpipe.formats.precomputed import PrecomputedSharding
from shardpipe.formats.precomputed_chunks import encode_chunk
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
    encoding : str
        The chunk encoding.
    """

    store: ShardStore
    prefix: str
    scale: ScaleGrid
    sharding: PrecomputedSharding
    encoding: str = "raw"


def assemble_chunk(
    box: Box, blocks: Sequence[np.ndarray], block_boxes: Sequence[Box]
) -> np.ndarray:
    """The chunk at voxel ``box``, Fortran-ordered, cut from the blocks overlapping it.

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
    return out


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
        chunk = assemble_chunk(box, [blocks[i] for i in near], [block_boxes[i] for i in near])
        chunks.append((int(chunk_id), encode_chunk(chunk, target.encoding)))
    buffers = target.sharding.encode_shard(chunks)
    key = target.prefix + target.sharding.shard_key(shard.shard)
    target.store.put(key, buffers)
    return WriteReport(
        shards=1,
        nbytes=sum(memoryview(b).nbytes for b in buffers),
        chunks_stored=len(chunks),
    )
