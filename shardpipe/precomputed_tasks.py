"""The tasks of a precomputed write: cut a shard's chunks, encode them, publish the shard file.

A chunk of a precomputed volume is stored as its voxels with ``x`` varying
fastest, then ``y``, ``z`` and the channel (``encoding: "raw"``), little
endian, truncated at the volume's end. One task writes each shard file in
one atomic ``put`` of the storage backend.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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


def encode_raw(chunk: np.ndarray) -> bytes:
    """The ``raw`` encoding of an ``(x, y, z, channel)`` chunk: x fastest, little endian."""
    little = chunk.astype(chunk.dtype.newbyteorder("<"), copy=False)
    return little.tobytes(order="F")


def write_box_shard(
    target: PrecomputedTarget, box: np.ndarray, *, shard: ShardChunks
) -> WriteReport:
    """Write a shard whose chunks fill one box; ``box`` is its voxels, ``(x, y, z, c)``."""
    assert shard.box is not None
    origin = [s.start for s in shard.box]
    scale = target.scale
    chunks = []
    for chunk_id, coords in zip(shard.ids.tolist(), shard.coords, strict=True):
        where = scale.chunk_box(coords)
        local = tuple(slice(w.start - o, w.stop - o) for w, o in zip(where, origin, strict=True))
        chunks.append((int(chunk_id), encode_raw(box[local])))
    return _publish(target, shard, chunks)


def write_scattered_shard(
    target: PrecomputedTarget, *chunks: np.ndarray, shard: ShardChunks
) -> WriteReport:
    """Write a shard from its chunks' voxels, given one array per chunk in ``shard.ids`` order."""
    encoded = [(int(i), encode_raw(c)) for i, c in zip(shard.ids.tolist(), chunks, strict=True)]
    return _publish(target, shard, encoded)


def _publish(
    target: PrecomputedTarget, shard: ShardChunks, chunks: list[tuple[int, bytes]]
) -> WriteReport:
    buffers = target.sharding.encode_shard(chunks)
    key = target.prefix + target.sharding.shard_key(shard.shard)
    target.store.put(key, buffers)
    return WriteReport(shards=1, nbytes=sum(len(b) for b in buffers), chunks_stored=len(chunks))
