"""Grid geometry of a sharded array: shards, inner chunks and Dask blocks.

Everything here is pure arithmetic on tuples; no I/O, no Dask, no zarr.

Vocabulary (per dimension, drawn for one axis)::

    array     |0 ........................................ shape)
    shards    |---- shard 0 ----|---- shard 1 ----|-- shard 2 (edge) --:....|
    chunks    |-c0-|-c1-|-c2-|-c3-|-c0-|-c1-|-c2-|-c3-|-c0-|-c1-|-c2:-|....|
    blocks    |--- b0 ---|----- b1 -----|--- b2 ---|------ b3 ------|

Shards and inner chunks form regular grids anchored at the origin; the last
shard and the last inner chunk along a dimension may extend past the array
("edge"), and that overhang reads as the fill value.  Dask blocks form an
arbitrary rectilinear grid given by ``arr.chunks``.
"""

from __future__ import annotations

import itertools
import math
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property

Shape = tuple[int, ...]
Coords = tuple[int, ...]
Box = tuple[tuple[int, int], ...]
"""A half-open box ``((start0, stop0), (start1, stop1), ...)`` in element units."""


def ceildiv(a: int, b: int) -> int:
    """Return ``ceil(a / b)`` for non-negative integers."""
    return -(-a // b)


def divisors_up_to(n: int, limit: int) -> list[int]:
    """The divisors of ``n`` (at least 1) that are at most ``limit``, in increasing order.

    At most ``2 * min(limit, sqrt(n))`` trial divisions: a huge axis (up to
    ``2**63``) costs no more than a large inner chunk.
    """
    root = math.isqrt(n)
    small = [d for d in range(1, min(root, limit) + 1) if n % d == 0]
    # a large divisor n // d is at most limit exactly when d >= ceil(n / limit)
    cofactors = [
        d for d in range(ceildiv(n, max(limit, 1)), root + 1) if n % d == 0 and n // d > root
    ]
    return small + [n // d for d in reversed(cofactors)]


def chunks_in_region(
    region: tuple[slice, ...], chunk_shape: Shape
) -> Iterator[tuple[Coords, tuple[slice, ...], tuple[slice, ...]]]:
    """The chunks of a regular grid that ``region`` touches, in C order.

    For each: its grid coordinates, the part of it inside ``region`` (in the
    chunk's own indices) and where that part lies in ``region`` (indices
    from the region's start). ``region`` holds slices with a start and a
    stop, no step.
    """
    ranges = [
        range(r.start // c, ceildiv(r.stop, c)) for r, c in zip(region, chunk_shape, strict=True)
    ]
    for coords in itertools.product(*ranges):
        starts = [i * c for i, c in zip(coords, chunk_shape, strict=True)]
        spans = [
            (max(r.start, s), min(r.stop, s + c))
            for r, s, c in zip(region, starts, chunk_shape, strict=True)
        ]
        inside = tuple(slice(lo - s, hi - s) for (lo, hi), s in zip(spans, starts, strict=True))
        into = tuple(
            slice(lo - r.start, hi - r.start) for (lo, hi), r in zip(spans, region, strict=True)
        )
        yield coords, inside, into


def box_to_slices(box: Box, origin: Sequence[int] | None = None) -> tuple[slice, ...]:
    """Turn ``box`` into slices, optionally relative to ``origin``."""
    if origin is None:
        return tuple(slice(start, stop) for start, stop in box)
    return tuple(slice(start - o, stop - o) for (start, stop), o in zip(box, origin, strict=True))


def intersect(a: Box, b: Box) -> Box | None:
    """Return the intersection of two boxes, or ``None`` where it is empty."""
    out = tuple((max(a0, b0), min(a1, b1)) for (a0, a1), (b0, b1) in zip(a, b, strict=True))
    if any(start >= stop for start, stop in out):
        return None
    return out


def box_size(box: Box) -> int:
    """Return the number of elements in ``box``."""
    return math.prod(stop - start for start, stop in box)


def box_contains(outer: Box, inner: Box) -> bool:
    """Whether ``inner`` lies wholly inside ``outer``."""
    return all(o0 <= i0 and i1 <= o1 for (o0, o1), (i0, i1) in zip(outer, inner, strict=True))


@dataclass(frozen=True)
class ShardLayout:
    """The regular shard grid and inner-chunk grid of one array.

    Parameters
    ----------
    shape : tuple of int
        Array shape.
    shard_shape : tuple of int
        Shape of one shard (the outer chunk of the Zarr array).
    chunk_shape : tuple of int
        Shape of one inner chunk; divides ``shard_shape`` in every dimension.
    """

    shape: Shape
    shard_shape: Shape
    chunk_shape: Shape

    def __post_init__(self) -> None:
        n = len(self.shape)
        if len(self.shard_shape) != n or len(self.chunk_shape) != n:
            raise ValueError(
                f"shape {self.shape}, shard_shape {self.shard_shape} and chunk_shape "
                f"{self.chunk_shape} must have the same number of dimensions"
            )
        for s, c in zip(self.shard_shape, self.chunk_shape, strict=True):
            if c <= 0 or s <= 0 or s % c:
                raise ValueError(
                    f"shard_shape {self.shard_shape} must be a positive multiple of "
                    f"chunk_shape {self.chunk_shape}"
                )

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    @cached_property
    def shard_grid(self) -> Shape:
        """Number of shards along each dimension."""
        return tuple(ceildiv(n, s) for n, s in zip(self.shape, self.shard_shape, strict=True))

    @cached_property
    def chunks_per_shard(self) -> Shape:
        """Number of inner chunks along each dimension of one shard."""
        return tuple(s // c for s, c in zip(self.shard_shape, self.chunk_shape, strict=True))

    @property
    def n_chunks_per_shard(self) -> int:
        """Number of inner chunks in one shard (also the number of index entries)."""
        return math.prod(self.chunks_per_shard)

    @property
    def n_shards(self) -> int:
        """Number of shards in the array."""
        return math.prod(self.shard_grid)

    def shard_coords(self) -> Iterator[Coords]:
        """Iterate over every shard's grid coordinates in C order."""
        return itertools.product(*(range(n) for n in self.shard_grid))

    def shard_box(self, shard: Coords) -> Box:
        """Return the full (unclipped) box of ``shard`` in array coordinates."""
        return tuple((i * s, (i + 1) * s) for i, s in zip(shard, self.shard_shape, strict=True))

    def clip(self, box: Box) -> Box | None:
        """Clip ``box`` to the array's extent; ``None`` when nothing remains."""
        return intersect(box, tuple((0, n) for n in self.shape))

    def chunk_box(self, shard: Coords, local: Coords) -> Box:
        """Return the full box of inner chunk ``local`` of ``shard`` in array coordinates."""
        return tuple(
            (i * s + j * c, i * s + (j + 1) * c)
            for i, j, s, c in zip(shard, local, self.shard_shape, self.chunk_shape, strict=True)
        )


@dataclass(frozen=True)
class ChunkBox:
    """A box of inner chunks inside one shard, in inner-chunk units.

    Parameters
    ----------
    start, stop : tuple of int
        Half-open range of local inner-chunk coordinates along each dimension.
    """

    start: Coords
    stop: Coords

    @property
    def n_chunks(self) -> int:
        """Number of inner chunks in the box."""
        return math.prod(b - a for a, b in zip(self.start, self.stop, strict=True))

    def contains(self, local: Coords) -> bool:
        """Whether inner chunk ``local`` lies in the box."""
        return all(a <= j < b for j, a, b in zip(local, self.start, self.stop, strict=True))

    def chunks(self) -> Iterator[Coords]:
        """Iterate over the local coordinates of the inner chunks in C order."""
        return itertools.product(*(range(a, b) for a, b in zip(self.start, self.stop, strict=True)))

    def chunk_boxes(self, layout: ShardLayout, shard: Coords) -> Iterator[Box]:
        """Each chunk's box, clipped to the array, in the order of :meth:`chunks`.

        The boxes of ``layout.clip(layout.chunk_box(shard, local))`` for every
        chunk, made per dimension once: a shard of 256 chunks asks for 3 x
        (4 + 1) intervals, not 256 boxes of arithmetic. Every chunk of the
        box must hold an array element (:func:`chunks_in_array`).
        """
        axes = []
        for i, a, b, s, c, n in zip(
            shard,
            self.start,
            self.stop,
            layout.shard_shape,
            layout.chunk_shape,
            layout.shape,
            strict=True,
        ):
            axes.append([(i * s + j * c, min(i * s + (j + 1) * c, n)) for j in range(a, b)])
        return itertools.product(*axes)

    def element_box(self, layout: ShardLayout, shard: Coords) -> Box:
        """Return the full box these chunks cover in array coordinates."""
        return tuple(
            (i * s + a * c, i * s + b * c)
            for i, a, b, s, c in zip(
                shard, self.start, self.stop, layout.shard_shape, layout.chunk_shape, strict=True
            )
        )


def chunks_in_array(layout: ShardLayout, shard: Coords) -> ChunkBox:
    """Return the box of inner chunks of ``shard`` that hold any array element.

    In an edge shard, inner chunks wholly past the array's end always read as
    the fill value; they are never stored and need no work.
    """
    stop = tuple(
        min(n_per, ceildiv(n - i * s, c))
        for n, i, s, c, n_per in zip(
            layout.shape,
            shard,
            layout.shard_shape,
            layout.chunk_shape,
            layout.chunks_per_shard,
            strict=True,
        )
    )
    return ChunkBox(start=(0,) * layout.ndim, stop=stop)


@dataclass(frozen=True)
class BlockGrid:
    """The rectilinear grid of Dask blocks, as given by ``dask_array.chunks``.

    Parameters
    ----------
    chunks : tuple of tuple of int
        Block sizes along each dimension (Dask's ``.chunks``).
    """

    chunks: tuple[tuple[int, ...], ...]

    @cached_property
    def bounds(self) -> tuple[tuple[int, ...], ...]:
        """Block boundaries along each dimension: ``(0, b0, b0 + b1, ..., shape)``."""
        return tuple(tuple(itertools.accumulate(c, initial=0)) for c in self.chunks)

    @property
    def shape(self) -> Shape:
        """Shape of the whole array."""
        return tuple(b[-1] for b in self.bounds)

    def block_box(self, block: Coords) -> Box:
        """Return the box of ``block`` in array coordinates."""
        return tuple((b[i], b[i + 1]) for b, i in zip(self.bounds, block, strict=True))

    def blocks_touching(self, box: Box) -> Iterator[Coords]:
        """Iterate over the blocks that intersect ``box`` (which must be non-empty)."""
        ranges = []
        for (start, stop), b in zip(box, self.bounds, strict=True):
            first = bisect_right(b, start) - 1
            last = bisect_right(b, stop - 1) - 1
            ranges.append([i for i in range(first, last + 1) if b[i] < b[i + 1]])  # skip empty
        return itertools.product(*ranges)

    @property
    def is_regular(self) -> bool:
        """Whether all blocks but the last along each dimension have one size."""
        return all(len(set(c[:-1])) <= 1 and (len(c) < 2 or c[-1] <= c[0]) for c in self.chunks)

    @property
    def max_block_elements(self) -> int:
        """Number of elements in the largest block."""
        return math.prod(max(c, default=0) for c in self.chunks)
