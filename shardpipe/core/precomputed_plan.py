"""Planning a sharded precomputed scale: chunk grid, chunk ids, shards, the ``auto`` rule.

Pure: tuples and NumPy in and out. The volume is indexed ``(x, y, z)``;
chunks are ``chunk_size`` voxels, clipped at the volume's end (the
precomputed format stores edge chunks truncated). A chunk's id is its
compressed Morton code; the sharding spec maps ids to shards.

The sharding spec is anything that has the bits, the hash and ``locate``
(:class:`ShardingSpec`; :class:`shardpipe.formats.precomputed.ShardingSpec`
is one). The ``auto`` rule that picks a spec lives with the writer
(:mod:`shardpipe.precomputed.auto_sharding`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from shardpipe.core.morton import low_bits_box, morton_bit_dims, morton_ids
from shardpipe.errors import InvalidArgumentError

MAX_SCATTERED_CHUNKS = 2**20
"""Most chunks of a scale whose shards are not boxes (murmurhash, or identity bits that do
not reach the top of the ids). Each chunk is hashed and listed in the write's graph, about
256 bytes and 30 us apiece (measured: 2**18 chunks, +67 MiB, 7.5 s), so 2**20 plan in about
256 MiB and half a minute; boxes need no per-chunk plan."""


class ShardingSpec(Protocol):
    """What planning needs of a sharding spec: its bits, its hash and where ids go.

    Its read-only attributes ``preshift_bits``, ``minishard_bits`` and
    ``shard_bits`` are the spec's bits (see the format's specification);
    ``hash`` is ``"identity"`` or ``"murmurhash3_x86_128"``.
    """

    @property
    def preshift_bits(self) -> int: ...

    @property
    def minishard_bits(self) -> int: ...

    @property
    def shard_bits(self) -> int: ...

    @property
    def hash(self) -> str: ...

    def locate(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Shard and minishard numbers of chunk ``ids``."""
        ...


@dataclass(frozen=True)
class ScaleGrid:
    """The chunk grid of one scale.

    Parameters
    ----------
    size : tuple of int
        Voxels per dimension, ``(x, y, z)``.
    chunk_size : tuple of int
        Voxels per chunk and dimension.
    """

    size: tuple[int, ...]
    chunk_size: tuple[int, ...]

    @property
    def grid(self) -> tuple[int, ...]:
        """Chunks per dimension."""
        return tuple(-(-n // c) for n, c in zip(self.size, self.chunk_size, strict=True))

    @property
    def id_bits(self) -> int:
        """Bits of the largest chunk id (the Morton code's length)."""
        return len(morton_bit_dims(self.grid))

    def chunk_box(self, coords: Sequence[int]) -> tuple[slice, ...]:
        """Voxel slices of the chunk at grid ``coords`` (clipped at the volume's end)."""
        return tuple(
            slice(k * c, min((k + 1) * c, n))
            for k, c, n in zip(coords, self.chunk_size, self.size, strict=True)
        )

    def all_coords(self) -> np.ndarray:
        """Grid coordinates of every chunk, one row each, in C order."""
        axes = np.meshgrid(*(np.arange(n) for n in self.grid), indexing="ij")
        return np.stack([a.reshape(-1) for a in axes], axis=1)


@dataclass(frozen=True)
class ShardChunks:
    """The chunks one shard file holds.

    Parameters
    ----------
    shard : int
        The shard's number.
    ids : numpy.ndarray
        Chunk ids (``uint64``), increasing.
    coords : numpy.ndarray
        Their grid coordinates, one row each.
    box : tuple of slice or None
        The voxel box the chunks fill, when they form one (identity hash with
        boxes: see :func:`shard_boxes`); None when they are scattered.
    """

    shard: int
    ids: np.ndarray
    coords: np.ndarray
    box: tuple[slice, ...] | None


def box_bits(scale: ScaleGrid, sharding: ShardingSpec) -> int | None:
    """Low id bits spanning one shard's box, or None when shards are not boxes.

    Shards are aligned boxes of chunks when the hash is the identity and
    the shard bits reach the top of the ids (no two boxes share a shard).
    """
    low = sharding.preshift_bits + sharding.minishard_bits
    if sharding.hash != "identity" or low + sharding.shard_bits < scale.id_bits:
        return None
    return low


def check_scattered(scale: ScaleGrid, sharding: ShardingSpec, factor: Sequence[int]) -> None:
    """Refuse a scale of scattered shards with more chunks than a plan lists.

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        Naming ``sharding``, when the shards are not boxes and the grid has
        more than :data:`MAX_SCATTERED_CHUNKS` chunks.
    """
    n_chunks = math.prod(scale.grid)
    if box_bits(scale, sharding) is None and n_chunks > MAX_SCATTERED_CHUNKS:
        raise InvalidArgumentError(
            "sharding",
            f"scale {tuple(factor)} has {n_chunks:,} chunks in shards that are not boxes "
            f"({sharding.hash} hash, {sharding.shard_bits} shard bits for ids of "
            f"{scale.id_bits} bits): each chunk would be hashed and listed in the graph, and "
            f"a write plans at most {MAX_SCATTERED_CHUNKS:,} that way",
            "Use sharding='auto' (identity-hashed boxes, one task per shard, no per-chunk "
            "plan), an identity spec whose preshift, minishard and shard bits cover the ids, "
            "or larger chunks",
        )


def shards_of(scale: ScaleGrid, sharding: ShardingSpec) -> Iterator[ShardChunks]:
    """Every shard that holds a chunk of the scale, in increasing shard number."""
    low = box_bits(scale, sharding)
    if low is not None:  # boxes: walk them, no per-chunk hashing
        box = low_bits_box(scale.grid, low)
        for origin in np.ndindex(*(-(-n // b) for n, b in zip(scale.grid, box, strict=True))):
            start = [o * b for o, b in zip(origin, box, strict=True)]
            stop = [min(s + b, n) for s, b, n in zip(start, box, scale.grid, strict=True)]
            axes = np.meshgrid(*(np.arange(a, b) for a, b in zip(start, stop, strict=True)))
            coords = np.stack([a.reshape(-1) for a in axes], axis=1)
            ids = morton_ids(coords, scale.grid)
            order = np.argsort(ids)
            shard, _ = sharding.locate(ids[:1])
            voxels = tuple(
                slice(a * c, min(b * c, n))
                for a, b, c, n in zip(start, stop, scale.chunk_size, scale.size, strict=True)
            )
            yield ShardChunks(int(shard[0]), ids[order], coords[order], voxels)
        return
    coords = scale.all_coords()
    ids = morton_ids(coords, scale.grid)
    shards, _ = sharding.locate(ids)
    order = np.lexsort((ids, shards))
    shards, ids, coords = shards[order], ids[order], coords[order]
    bounds = np.flatnonzero(np.diff(shards)) + 1
    for part in np.split(np.arange(len(ids)), bounds):
        if len(part):
            yield ShardChunks(int(shards[part[0]]), ids[part], coords[part], None)


def largest_shard_chunks(scale: ScaleGrid, sharding: ShardingSpec) -> int:
    """Most chunks any shard holds (an upper bound for scattered shards: the exact count)."""
    low = box_bits(scale, sharding)
    if low is not None:
        return math.prod(low_bits_box(scale.grid, low))
    return max((len(s.ids) for s in shards_of(scale, sharding)), default=0)
