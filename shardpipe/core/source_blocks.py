"""How a rechunk reads its source: block shapes aligned to the source's chunks, within a budget.

Pure: shapes and numbers in, shapes and counts out. A rechunk into shards
reads the source in Dask blocks and hands them to the write plan
(:mod:`shardpipe.core.plan`), which assembles shards from whole blocks,
pieces of them, or parts. Reading is cheapest when every block is a whole
number of source read units (chunks, or shards for a sharded source): each
unit is then read and decoded once. The rules of :func:`read_block_shape`:

1. Start, per axis, from the target shard's extent rounded up to whole read
   units (one block per shard where the units divide the shards; else the
   smallest aligned block covering a shard), never beyond the array.
2. While the block is larger than the budget, halve the axis with the most
   room, in steps that keep it aligned to both the read unit and the inner
   chunk (so that blocks hold whole inner chunks along it), down to one step.
   An axis that one inner chunk spans is not halved here: only the whole
   axis holds that chunk whole.
3. Then in steps of the read unit alone: inner chunks straddle blocks, and
   their pieces travel between tasks raw, but every unit is still read once.
   Where a whole number of steps divides the inner chunk near the half, the
   block takes it, so that blocks tile the chunks they cut.
4. Only then below the read unit, in inner-chunk steps: a unit is read by
   several blocks, and :func:`read_cost` counts the extra bytes (read
   amplification).

::

    source chunks (1, 1024, 1024), shards (256, 256, 256), inner (64, 64, 64):
    start (256, 1024, 1024) = 16 shards per block; over budget: z halves to
    128, then 64 (one inner chunk deep). y and x stay at 1024: a slab is
    never read twice.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from shardpipe.core.grid import Shape, ceildiv, divisors_up_to

INTERMEDIATE_CHUNK_BYTES = 4 << 20
"""The most raw bytes :func:`intermediate_chunks` grows a chunk of a copy to.

Fewer, larger files: measured on the time series of ``benchmarks/`` at 256MB
(``benchmarks/RESULTS.md`` section 21k), a copy in 96 chunks of 4 MiB instead of
384 of 1 MiB (88 of them read straight into their place in the second pass's
blocks) took a tenth less time; in a sampling profile, creating a file cost
about as much as cutting a MiB into it."""


@dataclass(frozen=True)
class ReadCost:
    """What reading a source in blocks costs.

    Attributes
    ----------
    reads : int
        Read units fetched and decoded, counting a unit once per block it
        touches.
    nbytes_read : int
        Raw bytes of those reads (whole units, clipped to the array).
    nbytes_source : int
        Raw bytes of the source array.
    """

    reads: int
    nbytes_read: int
    nbytes_source: int

    @property
    def amplification(self) -> float:
        """Bytes read over bytes of the source (1.0 when every unit is read once)."""
        return self.nbytes_read / self.nbytes_source if self.nbytes_source else 1.0


def _lcm(a: int, b: int) -> int:
    return a * b // math.gcd(a, b)


def read_block_shape(
    shape: Shape,
    itemsize: int,
    read_unit: Shape,
    shard_shape: Shape,
    chunk_shape: Shape,
    budget: int,
) -> Shape:
    """Shape of the Dask blocks to read the source in (see the module's rules).

    Parameters
    ----------
    shape : tuple of int
        The array's shape.
    itemsize : int
        Bytes per element.
    read_unit : tuple of int
        The source's chunk shape (its shard shape, if sharded).
    shard_shape, chunk_shape : tuple of int
        The target's shards and inner chunks.
    budget : int
        Largest block, in bytes (a share of ``max_mem``).
    """
    block = [
        max(1, min(ceildiv(s, u) * u, ceildiv(n, u) * u))
        for n, u, s in zip(shape, read_unit, shard_shape, strict=True)
    ]
    steps = [
        _aligned_step(n, u, c, b)
        for n, u, c, b in zip(shape, read_unit, chunk_shape, block, strict=True)
    ]

    tiles = [min(c, n) for n, c in zip(shape, chunk_shape, strict=True)]

    def nbytes() -> int:
        return math.prod(min(b, n) for b, n in zip(block, shape, strict=True)) * itemsize

    while nbytes() > budget:
        if _shrink(block, steps):
            continue
        # aligned to the read unit only: inner chunks straddle blocks (their pieces travel raw)
        if _shrink(block, list(read_unit), tiles):
            continue
        # below the read unit: whole inner chunks, each unit read by several blocks
        if not _shrink(block, [min(c, b) for c, b in zip(chunk_shape, block, strict=True)]):
            break
    return tuple(min(b, max(n, 1)) for b, n in zip(block, shape, strict=True))


def _aligned_step(n: int, unit: int, chunk: int, block: int) -> int:
    """Smallest block extent aligned to the read unit (and, if it fits, to inner chunks).

    Along an axis of ``n`` that one inner chunk spans, only the whole axis
    is aligned to it: the step is the block, which covers the axis.
    """
    both = _lcm(unit, chunk)
    if both <= block:
        return both
    return block if chunk >= n else unit


def _shrink(block: list[int], steps: Sequence[int], tiles: Sequence[int] | None = None) -> bool:
    """Halve the axis with the most steps of room, in whole steps; False if none has room.

    With ``tiles`` (inner chunk extents), the axis takes the largest whole
    number of steps that divides its tile, if one lies between an eighth and
    a half of the block: blocks then tile the inner chunks they cut, and the
    chunks of a two-pass copy (their common divisor) stay large. Inner
    chunks of 730 time steps, read in steps of 1, halve the block to 365
    and then to 146, not 182 (which shares only 2 with 730), and 73 to 10,
    not 36 (which shares 2).
    """
    room = [b // s for b, s in zip(block, steps, strict=True)]
    axis = max(range(len(block)), key=lambda d: room[d])
    if room[axis] <= 1:
        return False
    half = max(1, room[axis] // 2)
    if tiles is not None:
        tile = tiles[axis] // steps[axis] if tiles[axis] % steps[axis] == 0 else 0
        dividing = [k for k in range(half, max(1, half // 4) - 1, -1) if tile and tile % k == 0]
        half = dividing[0] if dividing else half
    block[axis] = half * steps[axis]
    return True


@functools.lru_cache(maxsize=65536)
def axis_reads(n: int, unit: int, block: int) -> tuple[int, int]:
    """Along an axis of ``n``: the read units blocks of ``block`` touch, and their summed
    extent (each unit counted whole, once per block that touches it).

    In closed form (an axis of a million steps in blocks of one took seconds, step by
    step): a whole block touches one unit and one more for each unit boundary inside it,
    so the whole blocks, together ``W`` long, touch as many units as there are blocks
    plus the multiples of ``unit`` below ``W`` that are not also multiples of ``block``.
    Each touch counts a whole unit, less what the last unit lacks where the axis ends
    inside it.
    """
    if n <= 0:
        return 0, 0
    whole, rest = divmod(n, block)
    span = whole * block
    touched = whole + (span - 1) // unit - (span - 1) // math.lcm(unit, block) if whole else 0
    if rest:
        touched += (n - 1) // unit - span // unit + 1
    extent = touched * unit
    short = ceildiv(n, unit) * unit - n  # what the axis's last unit lacks
    if short:
        last = (n - 1) // unit * unit  # where the last unit begins
        extent -= short * (ceildiv(n, block) - last // block)  # the blocks touching it
    return touched, extent


def read_cost(shape: Shape, itemsize: int, read_unit: Shape, block_shape: Shape) -> ReadCost:
    """Count the read units the blocks touch and their bytes (each unit decoded whole)."""
    axes = [axis_reads(n, u, b) for n, u, b in zip(shape, read_unit, block_shape, strict=True)]
    return ReadCost(
        reads=math.prod(touched for touched, _ in axes),
        nbytes_read=math.prod(extent for _, extent in axes) * itemsize,
        nbytes_source=math.prod(shape) * itemsize,
    )


def blocks_read_cost(
    shape: Shape,
    itemsize: int,
    read_unit: Shape,
    block_shape: Shape,
    blocks: Sequence[tuple[int, ...]],
) -> ReadCost:
    """What reading only the blocks of grid indices ``blocks`` costs (see :func:`read_cost`)."""
    reads = nbytes = raw = 0
    for index in blocks:
        touched, extent, size = 1, 1, 1
        for n, u, b, i in zip(shape, read_unit, block_shape, index, strict=True):
            start, stop = i * b, min(n, (i + 1) * b)
            first, last = start // u, (stop - 1) // u
            touched *= last - first + 1
            extent *= sum(min(n, (k + 1) * u) - k * u for k in range(first, last + 1))
            size *= stop - start
        reads, nbytes, raw = reads + touched, nbytes + extent * itemsize, raw + size * itemsize
    return ReadCost(reads=reads, nbytes_read=nbytes, nbytes_source=raw)


def _larger_extent(size: int, n: int, block: int, shard: int, chunk: int) -> int | None:
    """Twice ``size``, if an intermediate chunk may grow so along its axis; else None.

    Where one block spans the axis: while it divides the shard. Where blocks
    meet in whole inner chunks: while it divides both block and shard. Where
    blocks meet and an inner chunk spans the axis, the extent already is the
    block's largest divisor that fits (:func:`intermediate_chunks`): None.
    """
    if block >= n:
        return 2 * size if shard % (2 * size) == 0 else None
    if block % chunk == 0 and math.gcd(block, shard) % (2 * size) == 0:
        return 2 * size
    return None


def straddles(block_shape: Shape, shard_shape: Shape, chunk_shape: Shape) -> bool:
    """Whether inner chunks cross block edges inside shards that several blocks feed.

    Such a one-pass rechunk gathers raw pieces of inner chunks from several
    blocks into each shard, and the scheduler keeps the pieces of a shard
    alive until its last block is read: an intermediate store avoids that.
    """
    return any(
        b < s and b % c != 0 for b, s, c in zip(block_shape, shard_shape, chunk_shape, strict=True)
    )


def intermediate_chunks(
    shape: Shape,
    block_shape: Shape,
    shard_shape: Shape,
    chunk_shape: Shape,
    itemsize: int,
    max_nbytes: int = INTERMEDIATE_CHUNK_BYTES,
    block_nbytes: int | None = None,
) -> Shape:
    """Chunks of an intermediate copy that blocks fill whole and inner chunks hold whole.

    The first pass writes each block as whole intermediate chunks (no two
    blocks share one: every extent divides the block's, unless one block
    spans the whole axis, whose end is the array's); the second reads them in
    blocks of whole inner chunks. Along an axis where several blocks meet
    and the block is not a whole number of inner chunks, the extent is their
    common divisor, unless an inner chunk spans the axis: pass 2 reads that
    axis whole, and the extent is the block's largest divisor within
    ``max_nbytes`` (at least the common divisor). Along the others it starts
    at one inner chunk. Then each doubles (last axis first) while it still
    divides the shard (and the block, where blocks meet), the chunk stays
    within ``max_nbytes``, and the smallest block of pass 2 that holds whole
    inner chunks and whole intermediate chunks stays within ``block_nbytes``
    (fewer objects, without forcing pass 2 into larger blocks).

    ::

        frames (200, 700, 600), blocks (16, 700, 600), inner chunks (64, 64, 64):
        z: blocks meet every 16 frames -> gcd(16, 64) = 16;
        y, x: one block spans the axis -> 64, doubled up to the shard
        (not gcd(700, 64) = 4 and gcd(600, 64) = 8: chunks of 1 KiB)

        time slices (730, 256, 512) float32, blocks (32, 256, 512), inner
        chunks (730, 32, 32): t: 32, the block (not gcd(32, 730) = 2: pass 2
        reads all 730 slices); y and x doubled within max_nbytes
    """
    spans = [b >= n for b, n in zip(block_shape, shape, strict=True)]
    sizes = [
        c if whole or b % c == 0 else math.gcd(b, c)
        for b, c, whole in zip(block_shape, chunk_shape, spans, strict=True)
    ]
    for d, (n, b, c) in enumerate(zip(shape, block_shape, chunk_shape, strict=True)):
        if b < n <= c:  # pass 2 reads this axis whole: the block's largest divisor that fits
            rest = math.prod(sizes) // sizes[d] * itemsize
            sizes[d] = max([sizes[d], *divisors_up_to(b, max_nbytes // rest)])
    grown = True
    while grown:
        grown = False
        for d in reversed(range(len(sizes))):
            larger = _larger_extent(
                sizes[d], shape[d], block_shape[d], shard_shape[d], chunk_shape[d]
            )
            if larger is None:
                continue
            trial = [*sizes[:d], larger, *sizes[d + 1 :]]
            fits = math.prod(trial) * itemsize <= max_nbytes and (
                block_nbytes is None
                or math.prod(
                    min(n, _lcm(i, k)) for n, i, k in zip(shape, trial, chunk_shape, strict=True)
                )
                * itemsize
                <= block_nbytes
            )
            if fits:
                sizes[d] = larger
                grown = True
    return tuple(sizes)
