"""The rechunk plans a planner weighs, each with a modelled cost and memory, and the choice.

Pure: shapes and numbers in, :class:`~shardpipe.core.plan_costs.Candidate`
values out. A rechunk can go in three ways:

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

Each plan is costed by the model of :mod:`shardpipe.core.plan_costs`.
:func:`weigh_plans` searches each way for its cheapest plan that fits
``max_mem`` (block extents that are multiples of the read unit or of the
inner chunk, up to the whole axis, or the axis in a few even parts; the
one-pass plans of all those shapes costed at once, in numpy) and chooses
the cheapest of those;
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

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from shardpipe.core.display import format_bytes
from shardpipe.core.grid import Shape, ceildiv, divisors_up_to
from shardpipe.core.plan_costs import (
    BLOCK_COPIES,
    ONE_PASS,
    SMALLER_BLOCKS,
    Candidate,
    axis_cost,
    block_budget,
    block_memory,
    gathered_blocks,
    largest_block,
    one_pass_cost,
    one_pass_memory,
    two_pass_cost,
    weighted_total,
)
from shardpipe.core.source_blocks import read_block_shape

MAX_EXTENTS = 16
"""Block extents tried per axis before only powers of two of the steps are, so that
planning stays cheap on vast arrays."""


SPLITS = 4
"""Block extents also tried per axis: the axis cut in 2 to this many even parts (a block of
half an axis of 19 is 10, a multiple of neither the read unit nor the inner chunk)."""

TIE = 1e-9
"""Shapes whose costs, in floating point, are within this share of the cheapest's are costed
again in integers to choose among them."""

TIE_SHAPES = 64
"""The most shapes costed again so (the first in C order)."""

TWO_PASS_TRIES = 8
"""First-pass block shapes a planner tries for two passes (the largest that fit)."""


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


def block_extents(n: int, steps: Sequence[int], top: int, unit: int) -> list[int]:
    """Extents along an axis of ``n``: multiples of each step, up to the first reaching ``top``.

    Also the divisors of the read ``unit`` (blocks that tile a unit, each
    reading it again), and the axis cut in 2 to :data:`SPLITS` even parts.
    Beyond :data:`MAX_EXTENTS` multiples, only the steps times powers of two
    (and the largest); beyond :data:`MAX_EXTENTS` divisors, only the unit's
    halves.
    """
    reach = min(n, top)
    counts = [ceildiv(reach, s) for s in steps]  # each step's multiples, distinct
    highest = max(min(n, c * s) for c, s in zip(counts, steps, strict=True))
    vast = max(counts) > MAX_EXTENTS  # then more distinct multiples than that, surely
    extents = (
        []
        if vast
        else sorted(
            {min(n, k * s) for s, c in zip(steps, counts, strict=True) for k in range(1, c + 1)}
        )
    )
    if vast or len(extents) > MAX_EXTENTS:  # vast axes: the steps times powers of two
        doubled = {min(n, s << k) for s in steps for k in range(reach.bit_length() + 1)}
        extents = sorted(e for e in doubled | {highest} if e <= highest)
    tiles = divisors_up_to(unit, min(unit, n))
    if len(tiles) > MAX_EXTENTS:
        tiles = [unit >> k for k in range(unit.bit_length()) if unit % (1 << k) == 0]
    splits = {ceildiv(n, k) for k in range(2, SPLITS + 1)} - {0}  # the axis in a few even parts
    return sorted(set(extents) | {t for t in tiles if t < n} | splits)


def _cheapest(candidates: Sequence[Candidate], max_mem: int) -> Candidate | None:
    fitting = [c for c in candidates if c.fits(max_mem)]
    return min(fitting, key=lambda c: (c.cost.total, c.cost.memory)) if fitting else None


class _OnePassGrid:
    """The one-pass costs of every block shape of a grid of extents, at once (numpy).

    The same model as :func:`~shardpipe.core.plan_costs.one_pass_cost`,
    worked out per axis (:func:`~shardpipe.core.plan_costs.axis_cost`) and
    multiplied over the grid in floating point (the bytes a block shape of
    single elements would read pass any integer type on arrays of a few GiB);
    the shapes within :data:`TIE` of the cheapest are costed again by
    ``one_pass_cost`` itself, in integers, and the cheapest of those (then the
    least holding, then the first in C order of the sorted extents) is chosen.
    """

    def __init__(
        self,
        shape: Shape,
        itemsize: int,
        read_unit: Shape,
        shard_shape: Shape,
        chunk_shape: Shape,
        extents: Sequence[Sequence[int]],
        share: int,
    ) -> None:
        self.args = (shape, itemsize, read_unit, shard_shape, chunk_shape)
        self.itemsize = itemsize
        self.extents = extents
        ndim = len(shape)
        columns = [
            np.array([axis_cost(n, u, b, s, c) for b in axis], dtype=np.float64).reshape(-1, 5)
            for n, u, s, c, axis in zip(
                shape, read_unit, shard_shape, chunk_shape, extents, strict=True
            )
        ]

        def along(d: int, values: np.ndarray) -> np.ndarray:
            return values.reshape([-1 if k == d else 1 for k in range(ndim)])

        def product(column: int, ones: bool = False) -> np.ndarray:
            out = np.ones((1,) * ndim)
            for d, axis in enumerate(columns):
                values = axis[:, column]
                out = out * along(d, np.where(values > 0, values, 1) if ones else values)
            return out

        reads, extent, inside, blocks = (product(i) for i in range(4))
        cut = np.zeros((1,) * ndim, dtype=bool)
        once = np.ones((1,) * ndim, dtype=bool)
        for d, (n, axis) in enumerate(zip(shape, columns, strict=True)):
            cut = cut | along(d, axis[:, 4] > 0)
            once = once & along(d, axis[:, 1] == n)  # every unit along the axis read once
        gathered = np.where(cut, product(4, ones=True), 0.0)
        nbytes = math.prod(shape) * itemsize
        shards = math.prod(ceildiv(n, s) for n, s in zip(shape, shard_shape, strict=True))
        self.full = np.broadcast_shapes(*(along(d, a[:, 0]).shape for d, a in enumerate(columns)))
        self.within = inside * itemsize <= share
        self.inside = inside
        self.gathers = gathered > 0
        self.once = once
        self.memory = one_pass_memory(inside, itemsize, gathered)
        copied = np.where(self.gathers, float(nbytes), 0.0)
        self.total = weighted_total(
            extent * itemsize, nbytes, nbytes, copied, reads + shards, blocks
        )

    def _shape(self, flat: int) -> Shape:
        index = np.unravel_index(flat, self.full)
        return tuple(int(self.extents[d][int(i)]) for d, i in enumerate(index))

    def _everywhere(self, values: np.ndarray) -> np.ndarray:
        return np.broadcast_to(values, self.full).ravel()

    def cheapest(self, among: np.ndarray, max_mem: int) -> Candidate | None:
        """The cheapest (then least holding) shape ``among`` those within the share that fits."""
        mask = self._everywhere(among & self.within & (self.memory <= max_mem))
        if not mask.any():
            return None
        total = np.where(mask, self._everywhere(self.total), np.inf)
        near = np.flatnonzero(total <= total.min() * (1 + TIE))[:TIE_SHAPES]
        costed = [
            Candidate(ONE_PASS, b, one_pass_cost(*self.args, b)) for b in map(self._shape, near)
        ]
        return min(costed, key=lambda c: (c.cost.total, c.cost.memory))

    def largest_gathering(self, max_mem: int, count: int) -> list[Shape]:
        """Up to ``count`` read-once shapes whose blocks cut inner chunks and fit alone, largest
        first (the first passes two-pass plans are tried with)."""
        alone = BLOCK_COPIES * self.itemsize * self.inside <= max_mem
        flat = np.flatnonzero(self._everywhere(self.once & self.within & self.gathers & alone))
        sizes = self._everywhere(self.inside)[flat]
        order = np.argsort(-sizes, kind="stable")[:count]
        return [self._shape(int(f)) for f in flat[order]]


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
    layout = (shape, itemsize, read_unit, shard_shape, chunk_shape)
    grid = _OnePassGrid(*layout, extents, share)  # none above an eighth of the array
    extra = Candidate(ONE_PASS, largest, one_pass_cost(*layout, largest))
    extra_once = extra.cost.nbytes_read == extra.cost.nbytes_encoded
    ways: list[Candidate] = []
    once = grid.cheapest(grid.once, max_mem)
    first = _cheapest([c for c in (once, extra if extra_once else None) if c is not None], max_mem)
    ways.append(first or extra)
    again = grid.cheapest(~grid.once, max_mem)
    smaller = _cheapest(
        [c for c in (again, None if extra_once else extra) if c is not None], max_mem
    )
    if smaller is not None:
        ways.append(replace(smaller, kind=SMALLER_BLOCKS))
    # two passes from the largest read-once blocks that cut inner chunks and fit alone
    firsts = grid.largest_gathering(max_mem, TWO_PASS_TRIES)
    if (
        extra_once
        and largest not in firsts
        and gathered_blocks(shape, largest, shard_shape, chunk_shape)
        and block_memory(largest, shape, itemsize) <= max_mem
    ):
        firsts = sorted([*firsts, largest], key=lambda b: -math.prod(b))[:TWO_PASS_TRIES]
    copies = [two_pass_cost(*layout, b, max_mem, raw_copy) for b in firsts]
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
