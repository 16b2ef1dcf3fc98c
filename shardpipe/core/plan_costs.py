"""The cost model of rechunk plans: what a plan reads, decodes, encodes, writes and holds.

Pure: shapes and numbers in, :class:`PlanCost` and :class:`Candidate` values
out; :mod:`shardpipe.core.rechunk_plans` searches the plans with it. The
model (:func:`one_pass_cost`, :func:`two_pass_cost`) counts, for a plan: the
raw bytes read and decoded, encoded and written, the raw bytes copied without
a codec (pieces of inner chunks gathered between tasks, an intermediate copy
kept raw), the reads (objects fetched), the requests (reads and objects
written), the blocks (tasks) and the memory the plan holds at its peak
(:func:`block_memory`, :func:`gathered_blocks`). Its single number,
:attr:`PlanCost.total`, weighs each byte by what that work costs on one thread
(:data:`DECODE_WEIGHT`, :data:`ENCODE_WEIGHT`, :data:`WRITE_WEIGHT`,
:data:`COPY_WEIGHT`: decoding a byte costs about what encoding it does,
copying it a fifth of that) and adds :data:`REQUEST_BYTES` per request and
:data:`BLOCK_BYTES` per block.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

from shardpipe.core.display import format_bytes
from shardpipe.core.grid import Shape, ceildiv
from shardpipe.core.source_blocks import (
    axis_reads,
    intermediate_chunks,
    read_block_shape,
    read_cost,
)

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


def weighted_total(
    nbytes_read: Any,
    nbytes_encoded: Any,
    nbytes_written: Any,
    nbytes_copied: Any,
    requests: Any,
    blocks: Any,
) -> Any:
    """The weighted bytes, requests and blocks of a plan, its work rounded down to a byte.

    Numbers or numpy arrays of them alike (a planner weighs many block shapes at once).
    """
    work = (
        DECODE_WEIGHT * nbytes_read
        + ENCODE_WEIGHT * nbytes_encoded
        + WRITE_WEIGHT * nbytes_written
        + COPY_WEIGHT * nbytes_copied
    )
    return (work // 1) + requests * REQUEST_BYTES + blocks * BLOCK_BYTES


def one_pass_memory(elements: Any, itemsize: int, gathered: Any) -> Any:
    """What one pass holds per thread: a task's block (of ``elements``) and what it cuts
    (:data:`BLOCK_COPIES`), and the ``gathered`` blocks waiting for the inner chunks they
    feed (:func:`gathered_blocks`). Numbers or numpy arrays alike."""
    return (BLOCK_COPIES + gathered) * itemsize * elements


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
        return int(
            weighted_total(
                self.nbytes_read,
                self.nbytes_encoded,
                self.nbytes_written,
                self.nbytes_copied,
                self.requests,
                self.blocks,
            )
        )


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
    raw_copy : bool
        For two passes: whether the copy is kept raw (on a local disk), so that
        its bytes are copied, not encoded and decoded.
    """

    kind: str
    block_shape: Shape
    cost: PlanCost
    intermediate_chunks: Shape | None = None
    second_blocks: Shape | None = None
    raw_copy: bool = False

    def fits(self, max_mem: int) -> bool:
        """Whether its modelled memory is within ``max_mem``."""
        return self.cost.memory <= max_mem

    @property
    def _copied(self) -> str:
        """What its raw copies are: into the intermediate and back (a raw copy), or pieces
        gathered between tasks."""
        return "copied raw" if self.raw_copy else "gathered raw"

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
        pieces = _pieces(n, b, s, c)
        if pieces:
            cut = True
            count *= pieces
    return count if cut else 0


def _pieces(n: int, block: int, shard: int, chunk: int) -> int:
    """Along an axis of ``n``: the blocks an inner chunk takes pieces of, where blocks of
    ``block`` cut inner chunks of ``chunk`` within shards of ``shard``; 0 where they do not."""
    if block >= min(shard, n) or block % chunk == 0:
        return 0
    return ceildiv(chunk, block) + (0 if chunk % block == 0 else 1)


@functools.lru_cache(maxsize=65536)
def axis_cost(n: int, unit: int, block: int, shard: int, chunk: int) -> tuple[int, ...]:
    """What blocks of ``block`` along an axis of ``n`` come to, for :func:`one_pass_cost`.

    Returns the read units the blocks touch and their summed extent
    (:func:`~shardpipe.core.source_blocks.axis_reads`), the block's extent
    within the axis, the number of blocks, and the blocks an inner chunk takes
    pieces of where the blocks cut inner chunks (0 where they do not; see
    :func:`gathered_blocks`). The cost of a block shape is the product over its
    axes, so each axis is worked out once for all the shapes a planner weighs.
    """
    touched, extent = axis_reads(n, unit, block)
    return touched, extent, min(block, n), ceildiv(n, block), _pieces(n, block, shard, chunk)


def one_pass_cost(
    shape: Shape,
    itemsize: int,
    read_unit: Shape,
    shard_shape: Shape,
    chunk_shape: Shape,
    block_shape: Shape,
) -> PlanCost:
    """The modelled cost of one pass reading the source in ``block_shape`` blocks."""
    reads = extent = inside = blocks = pieces = shards = 1
    nbytes = itemsize
    cut = False
    for n, u, b, s, c in zip(shape, read_unit, block_shape, shard_shape, chunk_shape, strict=True):
        axis = axis_cost(n, u, b, s, c)
        reads *= axis[0]
        extent *= axis[1]
        inside *= axis[2]
        blocks *= axis[3]
        if axis[4]:
            cut = True
            pieces *= axis[4]
        nbytes *= n
        shards *= ceildiv(n, s)
    gathered = pieces if cut else 0
    return PlanCost(
        nbytes_read=extent * itemsize,
        nbytes_encoded=nbytes,
        nbytes_written=nbytes,
        reads=reads,
        requests=reads + shards,
        memory=one_pass_memory(inside, itemsize, gathered),
        nbytes_copied=nbytes if gathered else 0,  # the pieces, joined into inner chunks
        blocks=blocks,
    )


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
    return Candidate(TWO_PASSES, block_shape, cost, inter, second, raw_copy)
