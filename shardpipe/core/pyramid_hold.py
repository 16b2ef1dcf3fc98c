"""What the levels of a pyramid hold between their tasks, their blocks read in order.

The levels of a pyramid are written in one computation, each block of a
level feeding that level's shards and the regions downsampled into the next
level. Each level's blocks are read in an order, a few ahead of the tasks
taking them (:mod:`shardpipe.engine.pyramid_gates`): block ``i`` is made
only once every task taking blocks at or before ``i - read_ahead`` is done.
A block is then held from the moment it is made until the last task taking
it is done, so while block ``i`` is made the blocks held lie between
``i - read_ahead - span`` and ``i``, ``span`` being the most places (in the
level's order) between the first and the last block one task takes: at most
``span + read_ahead`` blocks per level (:func:`level_hold`).

The order (:func:`source_places`, :func:`block_places`): the source's blocks
shard by shard when each lies in one shard of level 0, the shards in Morton
order (so that the shards of level 0 making one shard of level 1, 2, ... come
one after the other), else in C order; a deeper level's blocks by the place
of the last block of the level before that they are made from, then in C
order.
"""

from __future__ import annotations

import itertools
import math
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import accumulate

import numpy as np

from shardpipe.core.grid import Coords
from shardpipe.core.morton import morton_ids

__all__ = [
    "LevelHold",
    "block_places",
    "blocks_in_shards",
    "level_hold",
    "pyramid_holds",
    "region_parents",
    "source_places",
]

Chunks = Sequence[Sequence[int]]


@dataclass(frozen=True)
class LevelHold:
    """What one level's blocks hold between tasks at most.

    Parameters
    ----------
    level : int
        The level (0: the source).
    span : int
        Most places, in the level's reading order, from the first to the
        last block one task takes: the blocks waiting for the tasks that
        gather them.
    read_ahead : int
        Blocks read ahead of the tasks taking them (one per worker thread).
    n_blocks : int
        The level's blocks.
    block_nbytes : int
        Bytes of the level's largest block (0 when its blocks are views of
        data in memory: holding them costs nothing).
    total_nbytes : int
        Bytes of all the level's blocks (0: views): no more is ever held.
    """

    level: int
    span: int
    read_ahead: int
    n_blocks: int
    block_nbytes: int
    total_nbytes: int

    @property
    def blocks(self) -> int:
        """Most blocks held at once: ``span + read_ahead``, at most all of them."""
        return min(self.span + self.read_ahead, self.n_blocks)

    @property
    def nbytes(self) -> int:
        """Most bytes the level's blocks hold between tasks."""
        return min(self.blocks * self.block_nbytes, self.total_nbytes)

    @property
    def waiting_nbytes(self) -> int:
        """Of those, the bytes of blocks waiting to be gathered (``span`` blocks), not read ahead.

        The blocks read ahead are one per worker thread, as the tasks
        running are: what the whole computation holds besides its tasks.
        """
        return min(min(self.span, self.n_blocks) * self.block_nbytes, self.total_nbytes)


def region_parents(before: Chunks, after: Chunks, step: Sequence[int]) -> list[list[range]]:
    """Per axis, per block of the level ``after``: the blocks of ``before`` it is made from.

    The level ``after`` (chunks of the downsampled level) is made region by
    region of the level ``before``, a region being an ``after`` block's
    windows of ``step`` (the last clipped to the level).
    """
    out = []
    for sizes_b, sizes_a, s in zip(before, after, step, strict=True):
        bounds = list(accumulate(sizes_b, initial=0))
        total = bounds[-1]
        ranges = []
        start = 0
        for n in sizes_a:
            stop = min(start + n * s, total)
            first = bisect_right(bounds, start) - 1
            last = bisect_right(bounds, stop - 1) - 1
            ranges.append(range(first, last + 1))
            start = stop
        out.append(ranges)
    return out


def _box_reduce(places: np.ndarray, parents: Sequence[Sequence[range]], reduce: str) -> np.ndarray:
    """Per block of the next level: the max (``"max"``) or min of ``places`` over its parents."""
    func = np.max if reduce == "max" else np.min
    out = places
    for axis, ranges in enumerate(parents):
        taken = [func(np.take(out, list(r), axis=axis), axis=axis) for r in ranges]
        out = np.stack(taken, axis=axis)
    return out


def block_places(numblocks: Sequence[int], last_parent: np.ndarray | None = None) -> np.ndarray:
    """Each block's place in the order a level's blocks are read (an array of ``numblocks``).

    ``last_parent`` gives, per block, the place of the last block of the
    level before that it is made from; None for the source (C order).
    """
    n = math.prod(numblocks)
    c_order = np.arange(n).reshape(tuple(numblocks))
    if last_parent is None:
        return c_order
    order = np.lexsort((c_order.ravel(), last_parent.ravel()))
    places = np.empty(n, dtype=np.int64)
    places[order] = np.arange(n)
    return places.reshape(tuple(numblocks))


def blocks_in_shards(
    chunks: Chunks, shard_shape: Sequence[int], offset: Sequence[int] | None = None
) -> bool:
    """Whether every block lies inside one shard (``offset``: where the blocks start)."""
    offset = offset or (0,) * len(chunks)
    for sizes, size, at in zip(chunks, shard_shape, offset, strict=True):
        bounds = [at + b for b in accumulate(sizes, initial=0)]
        if any(a // size != (b - 1) // size for a, b in itertools.pairwise(bounds) if b > a):
            return False
    return True


def source_places(
    chunks: Chunks, shard_shape: Sequence[int], offset: Sequence[int] | None = None
) -> np.ndarray:
    """Each source block's place in the order it is read: shard by shard, or in C order.

    When every block lies inside one shard (:func:`blocks_in_shards`), the
    blocks are read shard by shard, the shards in Morton order, the blocks
    of a shard in C order: a shard's blocks, and the shards making one shard
    of the next levels, come one after the other. A block across shards
    would join shards far apart in Morton order: then C order. ``offset``
    is where the blocks start in the array.
    """
    numblocks = [len(c) for c in chunks]
    if not blocks_in_shards(chunks, shard_shape, offset):
        return block_places(numblocks)
    offset = offset or (0,) * len(chunks)
    first_shard = [
        np.asarray([(at + b) // size for b in accumulate(sizes[:-1], initial=0)], dtype=np.int64)
        for sizes, size, at in zip(chunks, shard_shape, offset, strict=True)
    ]
    grid = [int(s.max()) + 1 if len(s) else 1 for s in first_shard]
    mesh = np.meshgrid(*first_shard, indexing="ij")
    shard_ids = morton_ids(np.stack([m.ravel() for m in mesh], axis=1), grid)
    c_order = np.arange(math.prod(numblocks))
    order = np.lexsort((c_order, shard_ids))
    places = np.empty(len(c_order), dtype=np.int64)
    places[order] = c_order
    return places.reshape(tuple(numblocks))


def _span(places: np.ndarray, blocks: Iterable[Coords]) -> int:
    """Places from the first to the last of ``blocks``."""
    at = [int(places[b]) for b in blocks]
    return max(at) - min(at) + 1 if at else 0


def level_hold(
    level: int,
    places: np.ndarray,
    parts: Iterable[Sequence[Coords]],
    next_places_of: tuple[np.ndarray, np.ndarray] | None,
    read_ahead: int,
    block_nbytes: int,
    total_nbytes: int,
) -> LevelHold:
    """What a level's blocks hold between tasks.

    Parameters
    ----------
    level : int
        The level.
    places : numpy.ndarray
        Each block's place in the level's reading order (:func:`block_places`).
    parts : iterable of sequence of Coords
        The blocks each of the level's writing tasks takes.
    next_places_of : (numpy.ndarray, numpy.ndarray) or None
        Per block of the next level, the first and the last place of the
        blocks of this level it is made from; None for the last level.
    read_ahead : int
        Blocks read ahead of the tasks taking them.
    block_nbytes, total_nbytes : int
        Bytes of the level's largest block and of all its blocks (0: views
        of data in memory).
    """
    span = max((_span(places, blocks) for blocks in parts), default=1)
    if next_places_of is not None:
        first, last = next_places_of
        span = max(span, int(np.max(last - first)) + 1)
    n = int(places.size)
    return LevelHold(level, span, max(1, read_ahead), n, block_nbytes, total_nbytes)


def pyramid_holds(
    chunks: Sequence[Chunks],
    steps: Sequence[Sequence[int]],
    parts: Sequence[Iterable[Sequence[Coords]]],
    *,
    itemsize: int,
    free: Sequence[bool],
    linked: Sequence[bool],
    shard_shapes: Sequence[Sequence[int]],
    read_ahead: int,
) -> list[LevelHold]:
    """What each level of a pyramid holds between tasks.

    Parameters
    ----------
    chunks : sequence of chunks
        Each level's blocks (Dask's ``.chunks``), level 0 first.
    steps : sequence of sequence of int
        Each level's step from the level before (level 0's first, ones).
    parts : sequence of iterables
        Per level, the blocks each of its writing tasks takes.
    itemsize : int
        Bytes per element.
    free : sequence of bool
        Per level, whether its blocks are views of data in memory (they
        then cost nothing to hold).
    linked : sequence of bool
        Per level, whether its blocks are read in the order of the blocks
        of the level before they are made from (level 0's ignored); else,
        as the source's are (:func:`source_places`, by the level's shards).
    shard_shapes : sequence of sequence of int
        Each level's shards.
    read_ahead : int
        Blocks read ahead of the tasks taking them.
    """
    holds = []
    places = source_places(chunks[0], shard_shapes[0])
    for k, level_chunks in enumerate(chunks):
        following = None
        next_places = None
        if k + 1 < len(chunks):
            parents = region_parents(level_chunks, chunks[k + 1], steps[k + 1])
            last = _box_reduce(places, parents, "max")
            following = (_box_reduce(places, parents, "min"), last)
            next_places = (
                block_places([len(c) for c in chunks[k + 1]], last)
                if linked[k + 1]
                else source_places(chunks[k + 1], shard_shapes[k + 1])
            )
        block = 0 if free[k] else math.prod(max(c, default=0) for c in level_chunks) * itemsize
        total = 0 if free[k] else math.prod(sum(c) for c in level_chunks) * itemsize
        holds.append(level_hold(k, places, parts[k], following, read_ahead, block, total))
        if next_places is not None:
            places = next_places
    return holds
