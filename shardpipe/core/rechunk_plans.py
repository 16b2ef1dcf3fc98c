"""The rechunk plans a planner weighs, each with a modelled cost and memory, and the choice.

Pure: shapes and numbers in, :class:`Candidate` values out. A rechunk can
go in three ways:

* **one pass, blocks aligned to the source's read unit** (chunks, or shards
  of a sharded source): every unit is read once, but where a block is
  thinner than an inner chunk of the target, the pieces of each inner chunk
  wait in memory until the last block feeding it is read;
* **one pass, blocks of whole inner chunks**: nothing waits between tasks,
  but a block thinner than a read unit reads that unit again (read
  amplification);
* **two passes**: copy the source, in unit-aligned blocks, into an
  intermediate whose chunks those blocks fill whole; then read the copy in
  blocks of whole inner chunks. Every byte is decoded, encoded and written
  twice.

The model (:func:`one_pass_cost`, :func:`two_pass_cost`) counts, for a
plan: the raw bytes read and decoded, encoded and written, the raw bytes
copied without a codec (pieces of inner chunks gathered between tasks, an
intermediate copy kept raw), the reads (objects fetched), the requests
(reads and objects written), the blocks (tasks) and the memory the plan
holds at its peak (:func:`block_memory`, :func:`gathered_blocks`). Its
single number, :attr:`PlanCost.total`, weighs each byte by what that work
costs on one thread (:data:`DECODE_WEIGHT`, :data:`ENCODE_WEIGHT`,
:data:`WRITE_WEIGHT`, :data:`COPY_WEIGHT`: decoding a byte costs about
what encoding it does, copying it a fifth of that) and adds
:data:`REQUEST_BYTES` per request and :data:`BLOCK_BYTES` per block.
:func:`weigh_plans` searches each way for its cheapest plan that fits
``max_mem`` (block extents that are multiples of the read unit or of the
inner chunk, up to the whole axis) and chooses the cheapest of those;
``tests/core/test_rechunk_plans.py`` checks the choice against a brute
force over every block shape, and :func:`shardpipe.plan_rechunk` runs the
way chosen.

::

    slabs (64, 512, 512) uint16 of (1, 512, 512) into (64, 256, 256) shards of
    (64, 64, 64) chunks, max_mem 16 MB, the copy on a local disk:
      one pass, blocks (8, 512, 512): each slab read once, but 8 blocks of 4 MiB
        wait for the inner chunks they cut: holds 40 MiB, over max_mem
      one pass, smaller blocks (8, 192, 512): each slab read 3 times (3.00x),
        holds 15 MiB: 1.50x the cost of two passes
      two passes, blocks (8, 512, 512), copy chunks (8, 128, 256): every byte
        decoded and encoded once, copied raw twice, holds 8 MiB       <- chosen
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from shardpipe.core.display import format_bytes
from shardpipe.core.grid import Shape, ceildiv
from shardpipe.core.source_blocks import intermediate_chunks, read_block_shape, read_cost

DECODE_WEIGHT = 1.0
"""Cost of reading and decoding a raw byte of the source, the unit of the others.

The weights are the rechunk limit's parts timed alone on one thread
(``benchmarks/rechunk_limit.py``; ``benchmarks/RESULTS.md`` section 21), per raw
byte: reading and decoding zstd chunks 2.6-2.7 s/GiB; cutting, encoding and
checksumming inner chunks 3.1-3.6 s/GiB; writing 0.4-0.7 s/GiB; copying raw
bytes (a cut, a raw write or read) 0.4-0.9 s/GiB."""

ENCODE_WEIGHT = 1.2
"""Cost of cutting, encoding and checksumming a raw byte, in units of :data:`DECODE_WEIGHT`."""

WRITE_WEIGHT = 0.2
"""Cost of writing a raw byte's encoding (codecs' ratio unknown), in the same unit."""

COPY_WEIGHT = 0.3
"""Cost of copying a raw byte without a codec (a gathered piece, a raw copy's write or read)."""

BLOCK_BYTES = 256 * 1024
"""What one block costs beyond its bytes (its tasks: about half a millisecond), in bytes."""

REQUEST_BYTES = 64 * 1024
"""What one request (a read or a written object) costs, in bytes moved.

Local disks answer in tens of microseconds, object stores in tens of
milliseconds: 64 KiB is a small object's worth, so that plans of many tiny
objects lose to plans of fewer large ones, while bytes still dominate."""

BLOCK_COPIES = 2
"""Bytes a task holds per byte of its block: the block and what is cut or encoded from it
(the planner's blocks start at ``max_mem / 2`` for this reason)."""

ONE_PASS = "one pass"
"""The kind of a one-pass plan whose blocks are aligned to the source's read unit."""

SMALLER_BLOCKS = "one pass, smaller blocks"
"""The kind of a one-pass plan whose blocks read some units more than once."""

TWO_PASSES = "two passes"
"""The kind of a plan that copies the source into an intermediate first."""

MAX_EXTENTS = 16
"""Block extents tried per axis before only powers of two of the steps are, so that
planning stays cheap on vast arrays."""


TWO_PASS_TRIES = 8
"""First-pass block shapes a planner tries for two passes (the largest that fit)."""

MIN_BLOCKS = 8
"""Blocks are at most an eighth of the array (but see :data:`SPLIT_FLOOR`), so that every
core reads and decodes.

Measured (benchmarks/RESULTS.md section 21): the time series in two passes took 4.7 s
at 256MB, its copy made in 5 blocks, and 3.4 s at 128MB, in 10 blocks (2 cores); in
section 21g, on 2 worker processes, 2.19 s and +206 MiB per worker in 6 blocks, 2.15 s
and +111 MiB in 12."""

SPLIT_FLOOR = 16 * 2**20
"""Arrays are not split into :data:`MIN_BLOCKS` blocks below this many bytes per block."""


def largest_block(nbytes: int) -> int:
    """The most bytes a block of an array of ``nbytes`` may hold, whatever the budget."""
    return max(nbytes // MIN_BLOCKS, SPLIT_FLOOR)


def block_budget(max_mem: int, nbytes: int) -> int:
    """The most bytes a block may hold under ``max_mem``, of an array of ``nbytes``.

    A task holds :data:`BLOCK_COPIES` times its block, so blocks start at ``max_mem /
    2`` (:func:`largest_block` at most). Measured (benchmarks/RESULTS.md section 6):
    blocks of ``max_mem`` held the process at 1.2 GB under a 1 GB budget (two threads,
    each a block); half of it kept the process under 700 MiB and was faster.
    """
    return max(1, min(max_mem // BLOCK_COPIES, largest_block(nbytes)))


@dataclass(frozen=True)
class PlanCost:
    """What a rechunk plan costs, by the model.

    Attributes
    ----------
    nbytes_read : int
        Raw bytes read and decoded (read units whole, as often as blocks touch them).
    nbytes_encoded : int
        Raw bytes encoded (the array once per pass).
    nbytes_written : int
        Bytes written through the target's codecs, counted raw (the codecs'
        ratio is unknown before the run).
    reads : int
        Objects (or ranges) read.
    requests : int
        Reads plus objects written.
    memory : int
        Bytes the plan holds at its peak, per worker thread.
    nbytes_copied : int
        Raw bytes copied without a codec: pieces of inner chunks gathered
        between tasks, and an intermediate copy kept raw (written, then read).
    blocks : int
        Blocks read (each a few tasks), over every pass.
    """

    nbytes_read: int
    nbytes_encoded: int
    nbytes_written: int
    reads: int
    requests: int
    memory: int
    nbytes_copied: int = 0
    blocks: int = 0

    @property
    def total(self) -> int:
        """The weighted bytes, requests and blocks (see the module): what plans are ranked by."""
        work = (
            DECODE_WEIGHT * self.nbytes_read
            + ENCODE_WEIGHT * self.nbytes_encoded
            + WRITE_WEIGHT * self.nbytes_written
            + COPY_WEIGHT * self.nbytes_copied
        )
        return int(work) + self.requests * REQUEST_BYTES + self.blocks * BLOCK_BYTES


@dataclass(frozen=True)
class Candidate:
    """One plan the planner weighed.

    Attributes
    ----------
    kind : str
        ``"one pass"`` (unit-aligned blocks), ``"one pass, smaller blocks"``
        (whole inner chunks) or ``"two passes"``.
    block_shape : tuple of int
        The blocks the source is read in (pass 1's, for two passes).
    cost : PlanCost
        Its modelled cost and memory.
    intermediate_chunks : tuple of int or None
        For two passes: the copy's chunks.
    second_blocks : tuple of int or None
        For two passes: the blocks the copy is read in.
    """

    kind: str
    block_shape: Shape
    cost: PlanCost
    intermediate_chunks: Shape | None = None
    second_blocks: Shape | None = None

    def fits(self, max_mem: int) -> bool:
        """Whether its modelled memory is within ``max_mem``."""
        return self.cost.memory <= max_mem

    @property
    def _copied(self) -> str:
        """What its raw copies are: into the intermediate and back, or pieces gathered."""
        return "copied raw" if self.intermediate_chunks is not None else "gathered raw"

    def rows(self, max_mem: int) -> list[tuple[str, str]]:
        """Two lines for a plan's summary: its shapes and memory, then its cost."""
        cost = self.cost
        copy = (
            f", a copy in chunks {self.intermediate_chunks} read in blocks {self.second_blocks}"
            if self.intermediate_chunks is not None
            else ""
        )
        over = "" if self.fits(max_mem) else ", over the memory budget"
        amplification = cost.nbytes_read / cost.nbytes_encoded if cost.nbytes_encoded else 1.0
        return [
            (
                self.kind,
                f"blocks {self.block_shape}{copy}; holds {format_bytes(cost.memory)}{over}",
            ),
            (
                "cost",
                f"{format_bytes(cost.nbytes_read)} read and decoded ({amplification:.2f}x), "
                f"{format_bytes(cost.nbytes_encoded)} encoded, "
                f"{format_bytes(cost.nbytes_written)} written"
                + (
                    f", {format_bytes(cost.nbytes_copied)} {self._copied}"
                    if cost.nbytes_copied
                    else ""
                )
                + f"; {cost.reads:,} reads, {cost.requests:,} requests",
            ),
        ]


@dataclass(frozen=True)
class PlanChoice:
    """The plans weighed and the one chosen, with why.

    Attributes
    ----------
    candidates : tuple of Candidate
        The best plan of each way, in the order of the module's list.
    chosen : Candidate
        The cheapest that fits ``max_mem``; if none fits, the one holding least.
    reason : str
        Why, in a sentence.
    """

    candidates: tuple[Candidate, ...]
    chosen: Candidate
    reason: str


def block_memory(block_shape: Shape, shape: Shape, itemsize: int) -> int:
    """Bytes a task holds for a block: :data:`BLOCK_COPIES` times its bytes."""
    return (
        BLOCK_COPIES
        * itemsize
        * math.prod(min(b, n) for b, n in zip(block_shape, shape, strict=True))
    )


def gathered_blocks(
    shape: Shape, block_shape: Shape, shard_shape: Shape, chunk_shape: Shape
) -> int:
    """Blocks whose pieces wait in memory until the inner chunks they feed are whole.

    Along an axis where a block is thinner than a shard (and than the
    array: a block spanning the axis ends where the array does) and cuts inner
    chunks, an inner chunk takes pieces of ``ceil(c / b)`` blocks, one more
    when the cuts do not fall on its edges; 0 when no block cuts an inner
    chunk.
    """
    count = 1
    cut = False
    for n, b, s, c in zip(shape, block_shape, shard_shape, chunk_shape, strict=True):
        if b < min(s, n) and b % c != 0:
            cut = True
            count *= ceildiv(c, b) + (0 if c % b == 0 else 1)
    return count if cut else 0


def one_pass_cost(
    shape: Shape,
    itemsize: int,
    read_unit: Shape,
    shard_shape: Shape,
    chunk_shape: Shape,
    block_shape: Shape,
) -> PlanCost:
    """The modelled cost of one pass reading the source in ``block_shape`` blocks."""
    axes = [_axis_reads(n, u, b) for n, u, b in zip(shape, read_unit, block_shape, strict=True)]
    reads = math.prod(touched for touched, _ in axes)
    nbytes_read = math.prod(extent for _, extent in axes) * itemsize
    nbytes = math.prod(shape) * itemsize
    block = block_memory(block_shape, shape, itemsize)
    gathered = gathered_blocks(shape, block_shape, shard_shape, chunk_shape)
    shards = math.prod(ceildiv(n, s) for n, s in zip(shape, shard_shape, strict=True))
    return PlanCost(
        nbytes_read=nbytes_read,
        nbytes_encoded=nbytes,
        nbytes_written=nbytes,
        reads=reads,
        requests=reads + shards,
        memory=block + gathered * block // BLOCK_COPIES,
        nbytes_copied=nbytes if gathered else 0,  # the pieces, joined into inner chunks
        blocks=math.prod(ceildiv(n, b) for n, b in zip(shape, block_shape, strict=True)),
    )


@functools.lru_cache(maxsize=4096)
def _axis_reads(n: int, unit: int, block: int) -> tuple[int, int]:
    """Along one axis: read units the blocks touch, and their summed extent (a unit per touch).

    :func:`~shardpipe.core.source_blocks.read_cost` is the product of these over the axes.
    """
    touched = extent = 0
    for start in range(0, n, block):
        first, last = start // unit, (min(n, start + block) - 1) // unit
        touched += last - first + 1
        extent += sum(min(n, (k + 1) * unit) - k * unit for k in range(first, last + 1))
    return touched, extent


def two_pass_cost(
    shape: Shape,
    itemsize: int,
    read_unit: Shape,
    shard_shape: Shape,
    chunk_shape: Shape,
    block_shape: Shape,
    max_mem: int,
    raw_copy: bool = True,
) -> Candidate:
    """Two passes: copy in ``block_shape`` blocks, then read the copy in whole inner chunks.

    With ``raw_copy`` (a copy on a local disk, see
    :mod:`shardpipe.rechunking.intermediate`), the copy is written and read
    without a codec: copied, not encoded and decoded.
    """
    budget = block_budget(max_mem, math.prod(shape) * itemsize)
    inter = intermediate_chunks(
        shape, block_shape, shard_shape, chunk_shape, itemsize, block_nbytes=budget
    )
    second = read_block_shape(shape, itemsize, inter, shard_shape, chunk_shape, budget)
    first = read_cost(shape, itemsize, read_unit, block_shape)
    copy_chunks = math.prod(ceildiv(n, i) for n, i in zip(shape, inter, strict=True))
    rest = one_pass_cost(shape, itemsize, inter, shard_shape, chunk_shape, second)
    copied = first.nbytes_source + rest.nbytes_read if raw_copy else 0
    first_blocks = math.prod(ceildiv(n, b) for n, b in zip(shape, block_shape, strict=True))
    cost = PlanCost(
        nbytes_read=first.nbytes_read + (0 if raw_copy else rest.nbytes_read),
        nbytes_encoded=rest.nbytes_encoded + (0 if raw_copy else first.nbytes_source),
        nbytes_written=rest.nbytes_written + (0 if raw_copy else first.nbytes_source),
        reads=first.reads + rest.reads,
        requests=first.reads + copy_chunks + rest.requests,
        memory=max(block_memory(block_shape, shape, itemsize), rest.memory),
        nbytes_copied=copied + rest.nbytes_copied,
        blocks=first_blocks + rest.blocks,
    )
    return Candidate(TWO_PASSES, block_shape, cost, inter, second)


def block_extents(n: int, steps: Sequence[int], top: int, unit: int) -> list[int]:
    """Extents along an axis of ``n``: multiples of each step, up to the first reaching ``top``.

    Also the divisors of the read ``unit`` (blocks that tile a unit, each
    reading it again). Beyond :data:`MAX_EXTENTS` multiples, only the steps
    times powers of two (and the largest); beyond :data:`MAX_EXTENTS`
    divisors, only the unit's halves.
    """
    reach = min(n, top)
    extents = sorted({min(n, k * s) for s in steps for k in range(1, ceildiv(reach, s) + 1)})
    if len(extents) > MAX_EXTENTS:  # vast axes: the steps times powers of two, and the axis whole
        doubled = {min(n, s << k) for s in steps for k in range(reach.bit_length() + 1)}
        extents = sorted(e for e in doubled | {extents[-1]} if e <= extents[-1])
    tiles = [d for d in range(1, min(unit, n) + 1) if unit % d == 0]
    if len(tiles) > MAX_EXTENTS:
        tiles = [unit >> k for k in range(unit.bit_length()) if unit % (1 << k) == 0]
    return sorted(set(extents) | {t for t in tiles if t < n})


def _cheapest(candidates: Sequence[Candidate], max_mem: int) -> Candidate | None:
    fitting = [c for c in candidates if c.fits(max_mem)]
    return min(fitting, key=lambda c: (c.cost.total, c.cost.memory)) if fitting else None


def weigh_plans(
    shape: Shape,
    itemsize: int,
    read_unit: Shape,
    shard_shape: Shape,
    chunk_shape: Shape,
    max_mem: int,
    raw_copy: bool = True,
) -> PlanChoice:
    """The cheapest plan of each way that fits ``max_mem``, and the cheapest of those.

    Parameters
    ----------
    shape, itemsize
        The array.
    read_unit : tuple of int
        The source's chunks (shards, if sharded).
    shard_shape, chunk_shape : tuple of int
        The target's shards and inner chunks.
    max_mem : int
        The memory budget, in bytes.
    raw_copy : bool
        Whether a two-pass plan's copy is kept raw (on a local disk).
    """
    extents = [
        block_extents(n, [u, c], n, u)
        for n, u, c in zip(shape, read_unit, chunk_shape, strict=True)
    ]
    nbytes = math.prod(shape) * itemsize
    share, budget = largest_block(nbytes), block_budget(max_mem, nbytes)
    largest = read_block_shape(shape, itemsize, read_unit, shard_shape, chunk_shape, budget)
    blocks = {  # none above an eighth of the array, as the planner reads them
        b
        for b in itertools.product(*extents)
        if block_memory(b, shape, itemsize) // BLOCK_COPIES <= share
    } | {largest}
    costs = {
        b: one_pass_cost(shape, itemsize, read_unit, shard_shape, chunk_shape, b) for b in blocks
    }
    once = [b for b, cost in costs.items() if cost.nbytes_read == cost.nbytes_encoded]
    again = [b for b, cost in costs.items() if cost.nbytes_read > cost.nbytes_encoded]
    ways: list[Candidate] = []
    first = _cheapest([Candidate(ONE_PASS, b, costs[b]) for b in once], max_mem)
    ways.append(first or Candidate(ONE_PASS, largest, costs[largest]))
    smaller = _cheapest([Candidate(SMALLER_BLOCKS, b, costs[b]) for b in again], max_mem)
    if smaller is not None:
        ways.append(smaller)
    # two passes from the largest read-once blocks that cut inner chunks and fit alone
    firsts = sorted(
        (
            b
            for b in once
            if gathered_blocks(shape, b, shard_shape, chunk_shape)
            and block_memory(b, shape, itemsize) <= max_mem
        ),
        key=lambda b: -block_memory(b, shape, itemsize),
    )
    copies = [
        two_pass_cost(shape, itemsize, read_unit, shard_shape, chunk_shape, b, max_mem, raw_copy)
        for b in firsts[:TWO_PASS_TRIES]
    ]
    two = _cheapest(copies, max_mem)
    if two is not None:
        ways.append(two)
    best = _cheapest(ways, max_mem)
    if best is None:
        least = min(ways, key=lambda c: c.cost.memory)
        return PlanChoice(
            tuple(ways), least, "no plan fits the memory budget: the one holding least"
        )
    others = [c for c in ways if c is not best]
    why = "the cheapest that fits the memory budget"
    if others:
        why += "; " + "; ".join(_against(best, c, max_mem) for c in others)
    return PlanChoice(tuple(ways), best, why)


def _against(best: Candidate, other: Candidate, max_mem: int) -> str:
    if not other.fits(max_mem):
        return f"{other.kind} would hold {format_bytes(other.cost.memory)}"
    ratio = other.cost.total / best.cost.total if best.cost.total else 1.0
    return f"{other.kind} costs {ratio:.2f}x"
