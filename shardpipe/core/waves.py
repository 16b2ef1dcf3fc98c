"""Waves: a write's shards cut into boxes, submitted to the scheduler one after another.

A petabyte array has about a million shards and tens of millions of tasks:
more than a Dask scheduler can hold, and more than a client can build
before the first byte is written. A write is therefore run in *waves*,
boxes of shards in C order, each small enough that its graph (built from
the source by Dask's own slicing and culling) stays bounded. While one wave
runs, the next is built and submitted, so at most two waves are on the
scheduler at once.

Waves are cut along the slowest dimensions first: a wave is a run of
consecutive indices along one dimension, with single indices along the
dimensions before it and whole ranges along the dimensions after it. For a
grid of 4 x 6 shards (rows x columns)::

    12 shards per wave: rows 0-1, rows 2-3           (2 waves of 12)
     6 shards per wave: one row each                 (4 waves of 6)
     4 shards per wave: each row in columns 0-3, 4-5 (8 waves of 4 and 2)

So every wave is a box, the elements it writes are a box of the array, and
the blocks feeding it are a box of the source's blocks.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

from shardpipe.core.grid import Coords

__all__ = ["Wave", "WaveSchedule", "wave_shards"]


@dataclass(frozen=True)
class Wave:
    """One box of shards written together.

    Parameters
    ----------
    number : int
        Position of the wave, from 0.
    ranges : tuple of range
        Per dimension, the shard indices of the box.
    """

    number: int
    ranges: tuple[range, ...]

    @property
    def n_shards(self) -> int:
        """Number of shards in the wave."""
        return math.prod(len(r) for r in self.ranges)

    def contains(self, shard: Coords) -> bool:
        """Whether ``shard`` lies in the wave."""
        return all(i in r for i, r in zip(shard, self.ranges, strict=True))


@dataclass(frozen=True)
class WaveSchedule:
    """The waves of a box of shards, at most ``max_shards`` shards each.

    Parameters
    ----------
    ranges : tuple of range
        Per dimension, the shard indices the write touches.
    max_shards : int
        Most shards in one wave (at least 1).
    """

    ranges: tuple[range, ...]
    max_shards: int

    def __post_init__(self) -> None:
        if self.max_shards < 1:
            raise ValueError(f"max_shards must be at least 1, got {self.max_shards}")

    @property
    def _split(self) -> tuple[int, int]:
        """The dimension waves cut along and the indices of it per wave."""
        inner = 1
        for dim in reversed(range(len(self.ranges))):
            here = len(self.ranges[dim])
            if inner * here > self.max_shards:
                return dim, max(1, self.max_shards // inner)
            inner *= here
        return -1, 1  # everything in one wave

    @property
    def n_waves(self) -> int:
        """Number of waves (0 when there is no shard)."""
        if any(len(r) == 0 for r in self.ranges):
            return 0
        dim, step = self._split
        if dim < 0:
            return 1
        outer = math.prod(len(r) for r in self.ranges[:dim])
        return outer * -(-len(self.ranges[dim]) // step)

    def wave(self, number: int) -> Wave:
        """Return wave ``number`` (0 <= number < :attr:`n_waves`)."""
        if not 0 <= number < self.n_waves:
            raise IndexError(f"wave {number} of {self.n_waves}")
        dim, step = self._split
        if dim < 0:
            return Wave(number, self.ranges)
        along = -(-len(self.ranges[dim]) // step)
        outer, k = divmod(number, along)
        ranges = list(self.ranges)
        for d in reversed(range(dim)):  # unravel the outer position, C order
            outer, i = divmod(outer, len(self.ranges[d]))
            ranges[d] = self.ranges[d][i : i + 1]
        ranges[dim] = self.ranges[dim][k * step : (k + 1) * step]
        return Wave(number, tuple(ranges))

    def __iter__(self) -> Iterator[Wave]:
        return (self.wave(k) for k in range(self.n_waves))

    def wave_of(self, shard: Coords) -> int:
        """The number of the wave holding ``shard`` (one the schedule covers)."""
        dim, step = self._split
        if dim < 0:
            return 0
        outer = 0
        for d in range(dim):
            outer = outer * len(self.ranges[d]) + self.ranges[d].index(shard[d])
        along = -(-len(self.ranges[dim]) // step)
        return outer * along + self.ranges[dim].index(shard[dim]) // step


def wave_shards(tasks_per_shard: float, max_tasks: int, min_shards: int, total_shards: int) -> int:
    """How many shards a wave holds: as many as ``max_tasks`` tasks allow.

    Parameters
    ----------
    tasks_per_shard : float
        Graph tasks per shard of the plan (write, parts, pieces, stamps).
    max_tasks : int
        Most tasks one wave may put on the scheduler.
    min_shards : int
        Fewest shards per wave, whatever the tasks (enough to keep every
        worker thread busy).
    total_shards : int
        Shards of the whole write: a wave never needs more.

    Returns
    -------
    int
        Between 1 and ``max(total_shards, 1)``.
    """
    by_tasks = int(max_tasks // max(tasks_per_shard, 1.0))
    return max(1, min(max(total_shards, 1), max(by_tasks, min_shards)))
