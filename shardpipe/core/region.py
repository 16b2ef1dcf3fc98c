"""Where a source's blocks land inside an array, and how they cover its inner chunks.

A write covers a *region* of the target array: the whole array for a new
array, a box of it for a region write or an update, the new end of it for an
append. The source's Dask blocks tile the region, placed at its offset::

    array     |0 .............................................. shape)
    region            |offset ............... offset + source shape)
    blocks            |-- b0 --|---- b1 ----|-- b2 --|
    chunks    |-c-|-c-|-c-|-c-|-c-|-c-|-c-|-c-|-c-|-c-|-c-|-c-|-c-|
                   ^partial  ^full ...            full^ ^partial

An inner chunk the region *touches* is either *fully covered* (every one of
its elements inside the array lies in the region: it is encoded afresh from
the source) or *partly covered* (its old content must be read, merged with
the source's and re-encoded). Inner chunks the region does not touch keep
their bytes. Along each dimension the fully covered chunks form one run, so
in every shard they form a box (:class:`ShardCoverage`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from operator import getitem

from shardpipe.core.grid import (
    BlockGrid,
    Box,
    ChunkBox,
    Coords,
    ShardLayout,
    ceildiv,
    chunks_in_array,
    intersect,
)
from shardpipe.errors import PlanError


@dataclass(frozen=True)
class ShardCoverage:
    """How a region covers the inner chunks of one shard.

    Parameters
    ----------
    in_array : ChunkBox
        The shard's inner chunks that hold any array element.
    touched : ChunkBox
        The inner chunks with at least one element in the region.
    full : ChunkBox or None
        The touched inner chunks whose every in-array element lies in the
        region; ``None`` when there are none.
    """

    in_array: ChunkBox
    touched: ChunkBox
    full: ChunkBox | None

    @property
    def n_full(self) -> int:
        """Number of fully covered inner chunks."""
        return 0 if self.full is None else self.full.n_chunks

    @property
    def n_partial(self) -> int:
        """Number of partly covered inner chunks (to read, merge and re-encode)."""
        return self.touched.n_chunks - self.n_full

    @property
    def n_untouched(self) -> int:
        """Number of in-array inner chunks the region leaves alone."""
        return self.in_array.n_chunks - self.touched.n_chunks

    @property
    def is_whole_shard(self) -> bool:
        """Whether the region covers every in-array chunk of the shard fully."""
        return self.full == self.in_array

    def is_full(self, local: Coords) -> bool:
        """Whether inner chunk ``local`` is fully covered."""
        return self.full is not None and self.full.contains(local)

    def partial_chunks(self) -> Iterator[Coords]:
        """The partly covered inner chunks, in C order."""
        return (c for c in self.touched.chunks() if not self.is_full(c))


@dataclass(frozen=True)
class Placement:
    """A source's Dask block grid placed inside an array at ``offset``.

    Parameters
    ----------
    layout : ShardLayout
        Shard and inner-chunk grids of the target array.
    blocks : BlockGrid
        The source's Dask blocks; together they tile the region.
    offset : tuple of int
        Array coordinates of the source's first element.

    Raises
    ------
    PlanError
        If the region does not lie inside the array.
    """

    layout: ShardLayout
    blocks: BlockGrid
    offset: Coords

    def __post_init__(self) -> None:
        if len(self.offset) != self.layout.ndim or len(self.blocks.chunks) != self.layout.ndim:
            raise PlanError(
                f"a source of {len(self.blocks.chunks)} dimensions at offset {self.offset} "
                f"cannot be placed in an array of {self.layout.ndim} dimensions"
            )
        for o, n, size in zip(self.offset, self.layout.shape, self.blocks.shape, strict=True):
            if o < 0 or o + size > n:
                raise PlanError(
                    f"a source of shape {self.blocks.shape} at offset {self.offset} does not "
                    f"fit inside the array of shape {self.layout.shape}"
                )

    @classmethod
    def whole(cls, layout: ShardLayout, blocks: BlockGrid) -> Placement:
        """The source covers the whole array (a new array)."""
        return cls(layout, blocks, (0,) * layout.ndim)

    @property
    def region(self) -> Box:
        """The box of the array the source covers."""
        return tuple((o, o + n) for o, n in zip(self.offset, self.blocks.shape, strict=True))

    @property
    def is_whole_array(self) -> bool:
        """Whether the region is the whole array."""
        return self.region == tuple((0, n) for n in self.layout.shape)

    @property
    def is_empty(self) -> bool:
        """Whether the region holds no element."""
        return any(start >= stop for start, stop in self.region)

    @cached_property
    def block_intervals(self) -> tuple[tuple[tuple[int, int], ...], ...]:
        """Per dimension, the interval of each block index in array coordinates."""
        return tuple(
            tuple((a + o, b + o) for a, b in itertools.pairwise(bounds))
            for bounds, o in zip(self.blocks.bounds, self.offset, strict=True)
        )

    def block_box(self, block: Coords) -> Box:
        """Return the box of ``block`` in array coordinates."""
        return tuple(map(getitem, self.block_intervals, block))

    def blocks_touching(self, box: Box) -> Iterator[Coords]:
        """Iterate over the blocks that intersect ``box`` (array coordinates)."""
        inside = intersect(box, self.region)
        if inside is None:
            return iter(())
        local = tuple((a - o, b - o) for (a, b), o in zip(inside, self.offset, strict=True))
        return self.blocks.blocks_touching(local)

    @cached_property
    def shard_ranges(self) -> tuple[range, ...]:
        """Per dimension, the shard indices the region touches."""
        if self.is_empty:
            return tuple(range(0) for _ in self.region)
        return tuple(
            range(start // s, ceildiv(stop, s))
            for (start, stop), s in zip(self.region, self.layout.shard_shape, strict=True)
        )

    @property
    def n_shards(self) -> int:
        """Number of shards the region touches."""
        return math.prod(len(r) for r in self.shard_ranges)

    def shards(self) -> Iterator[Coords]:
        """Iterate over the shards the region touches, in C order."""
        return itertools.product(*self.shard_ranges)

    def coverage(self, shard: Coords) -> ShardCoverage:
        """Classify the inner chunks of ``shard`` by how the region covers them."""
        layout = self.layout
        in_array = chunks_in_array(layout, shard)
        touched_start, touched_stop, full_start, full_stop = [], [], [], []
        for d, ((r0, r1), n, i, s, c) in enumerate(
            zip(
                self.region,
                layout.shape,
                shard,
                layout.shard_shape,
                layout.chunk_shape,
                strict=True,
            )
        ):
            base = i * s
            first = max(0, (r0 - base) // c)
            last = min(in_array.stop[d], ceildiv(r1 - base, c))  # exclusive
            touched_start.append(first)
            touched_stop.append(max(first, last))
            # fully covered: chunk [lo, min(lo + c, n)) inside [r0, r1)
            # only the first and the last touched chunk can stick out of the region
            full_first = max(first, ceildiv(r0 - base, c))
            full_last = last if min(base + last * c, n) <= r1 else last - 1
            full_start.append(full_first)
            full_stop.append(max(full_first, full_last))
        touched = ChunkBox(tuple(touched_start), tuple(touched_stop))
        full = ChunkBox(tuple(full_start), tuple(full_stop))
        return ShardCoverage(in_array, touched, full if full.n_chunks else None)
