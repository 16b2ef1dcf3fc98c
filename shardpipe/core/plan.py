"""Write plans: which Dask blocks feed which shard, in how many parts, at what memory.

A plan is an inspectable value computed before anything runs. It maps a
source's Dask blocks, placed in a region of the target array
(:class:`~shardpipe.core.region.Placement`), onto the array's shards:

* every shard the region touches is written by **parts**: boxes of inner
  chunks whose memory fits the budget. A shard that fits is one part and is
  published in one go by the task that writes that part. A larger shard has
  several parts, written independently, and a final *stamp* step that writes
  the index and publishes the shard;
* a part either lies inside one Dask block (*direct*: the task holding that
  block slices, encodes and writes it) or gathers *pieces* from several
  blocks: each block encodes the inner chunks it holds whole and sends raw
  only the bits of chunks that straddle block edges. On schedulers in this
  process, where nothing travels, a part's own task may cut its blocks itself
  (*gathered in the task*) where holding all of them fits the budget;
* each inner chunk the region touches is fully covered (encoded afresh) or
  partly covered (its old content is needed: see
  :class:`~shardpipe.core.region.ShardCoverage`).

Part sizes come from the memory model (:mod:`shardpipe.core.memory`): the
largest part for which every task kind fits ``max_mem``; a plan that cannot
fit is refused before anything runs.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import cached_property

from shardpipe import advice
from shardpipe.core.display import format_bytes
from shardpipe.core.grid import (
    BlockGrid,
    ChunkBox,
    Coords,
    Shape,
    ShardLayout,
    intersect,
)
from shardpipe.core.memory import MemoryModel, TaskMemory, check_budget
from shardpipe.core.parts import block_alignment, choose_part_chunks, tile
from shardpipe.core.plan_totals import PlanTotals, TotalsBuilder
from shardpipe.core.region import Placement
from shardpipe.core.shard_classes import shard_classes
from shardpipe.core.shard_plan import PartPlan, ShardPlan
from shardpipe.core.shard_translation import TranslatedShards
from shardpipe.errors import MemoryBudgetError, PlanError

__all__ = ["PartPlan", "PlanError", "PlanTotals", "ShardPlan", "WritePlan", "plan_write"]


@dataclass(frozen=True)
class WritePlan:
    """How a Dask array becomes shards, planned before anything runs.

    Parameters
    ----------
    placement : Placement
        The source's blocks placed in a region of the target array.
    itemsize : int
        Bytes per element.
    max_mem : int
        Memory budget per task in bytes.
    model : MemoryModel
        The memory model the plan was sized with.
    part_chunks : Shape
        Shape of a (non-edge) part, in inner chunks.
    stamp_nbytes : int
        Bytes a stamp task holds (the index, with any padding).
    max_parts : int or None
        Most parts the store allows per shard.
    """

    placement: Placement
    itemsize: int
    max_mem: int
    model: MemoryModel
    part_chunks: Shape
    stamp_nbytes: int = 0
    max_parts: int | None = None

    @property
    def layout(self) -> ShardLayout:
        """Shard and inner-chunk grids of the target array."""
        return self.placement.layout

    @property
    def blocks(self) -> BlockGrid:
        """The source's Dask block grid."""
        return self.placement.blocks

    @property
    def chunk_nbytes(self) -> int:
        """Raw bytes of one inner chunk."""
        return math.prod(self.layout.chunk_shape) * self.itemsize

    @property
    def part_nbytes(self) -> int:
        """Raw bytes of one full part."""
        return math.prod(self.part_chunks) * self.chunk_nbytes

    @property
    def block_nbytes(self) -> int:
        """Raw bytes of the largest Dask block."""
        return self.blocks.max_block_elements * self.itemsize

    def shard(self, coords: Coords) -> ShardPlan:
        """Plan the shard at ``coords`` (one the region touches)."""
        coverage = self.placement.coverage(coords)
        parts = []
        for number, chunk_box in enumerate(tile(coverage.touched, self.part_chunks)):
            full = self.layout.clip(chunk_box.element_box(self.layout, coords))
            region = None if full is None else intersect(full, self.placement.region)
            assert region is not None  # touched chunks hold elements of the region
            feeding = tuple(self.placement.blocks_touching(region))
            sizes = tuple(self._block_nbytes(b) for b in feeding)
            parts.append(PartPlan(number, chunk_box, region, feeding, sizes))
        padded = len(parts) > 1
        for i, p in enumerate(parts):
            held = self.model.gathered_in_task(
                sum(p.blocks_nbytes), self._raw(p.chunks), padded=padded
            )
            parts[i] = replace(p, gather_in_task=held <= self.max_mem)
        return ShardPlan(coords, coverage, tuple(parts))

    def iter_shards(self) -> Iterator[ShardPlan]:
        """Plan every shard the region touches, in C order, one at a time."""
        return self.shards_in(self.placement.shard_ranges)

    def shards_in(
        self, ranges: Sequence[range], skip: Collection[Coords] = frozenset()
    ) -> Iterator[ShardPlan]:
        """Plan the shards of a box of them (``ranges`` per dimension), in C order.

        Every shard must be one the region touches; those in ``skip`` are
        left out. Each class of shards alike up to a translation is planned
        once, and its plan moved to the others
        (:class:`~shardpipe.core.shard_translation.TranslatedShards`).
        """
        plans = TranslatedShards(self.placement, self.shard)
        return (plans.shard(c) for c in itertools.product(*ranges) if c not in skip)

    @cached_property
    def shards(self) -> tuple[ShardPlan, ...]:
        """Every shard's plan, in C order, held at once: for small plans and tests.

        Everything shardpipe needs of a plan comes from :attr:`totals` or
        :meth:`iter_shards`, which never hold every shard.
        """
        return tuple(self.iter_shards())

    def _raw(self, chunks: ChunkBox) -> int:
        return chunks.n_chunks * self.chunk_nbytes

    def _block_nbytes(self, block: Coords) -> int:
        sizes = self.blocks.chunks
        return math.prod(sizes[d][i] for d, i in enumerate(block)) * self.itemsize

    # -- summary -------------------------------------------------------------
    @cached_property
    def totals(self) -> PlanTotals:
        """Counts and peaks of the whole plan, from one shard plan per class of shards.

        Exact: shards of one class (:mod:`shardpipe.core.shard_classes`) add
        up to the same figures, so each class's figures count as many times
        as it has shards.
        """
        totals = TotalsBuilder(self.model, self.chunk_nbytes, self.stamp_nbytes)
        for shard_class in shard_classes(self.placement, self.part_chunks):
            totals.add(self.shard(shard_class.representative), shard_class.count)
        return totals.result()

    @property
    def task_counts(self) -> dict[str, int]:
        """Tasks per kind in a graph for any scheduler (pieces for gathered parts)."""
        return dict(self.totals.task_counts)

    @property
    def task_counts_in_process(self) -> dict[str, int]:
        """Tasks per kind in a graph for a scheduler in this process."""
        return dict(self.totals.task_counts_in_process)

    @property
    def num_tasks(self) -> int:
        """Number of tasks the plan adds to a graph for any scheduler."""
        return sum(self.totals.task_counts.values())

    @property
    def n_shards(self) -> int:
        """Number of shards the write touches."""
        return self.placement.n_shards

    @property
    def n_multipart_shards(self) -> int:
        """Number of shards written in several parts and stamped."""
        return self.totals.n_multipart_shards

    @property
    def n_parts(self) -> int:
        """Number of parts over all shards."""
        return self.totals.n_parts

    @property
    def max_parts_per_shard(self) -> int:
        """Largest number of parts in one shard."""
        return self.totals.max_parts_per_shard

    @property
    def nbytes_in(self) -> int:
        """Raw bytes the source gives the write."""
        return math.prod(b - a for a, b in self.placement.region) * self.itemsize

    @property
    def nbytes_out_max(self) -> int:
        """Most encoded bytes the write can store (every touched chunk stored, indexes)."""
        raw = self.totals.n_chunks_touched * self.chunk_nbytes
        return self.model.encoded(raw) + self.n_shards * self.stamp_nbytes

    @property
    def n_chunks_full(self) -> int:
        """Inner chunks encoded afresh from the source."""
        return self.totals.n_chunks_full

    @property
    def n_chunks_partial(self) -> int:
        """Inner chunks whose old content must be read and merged."""
        return self.totals.n_chunks_touched - self.totals.n_chunks_full

    def projected_peaks(self, *, in_process: bool = False) -> dict[str, TaskMemory]:
        """Projected peak bytes per task kind, with the task that reaches each."""
        return dict(self.totals.peaks_in_process if in_process else self.totals.peaks)

    @property
    def max_projected_mem(self) -> int:
        """Largest memory any task is expected to hold, in bytes, on any scheduler."""
        peaks = [*self.projected_peaks().values(), *self.projected_peaks(in_process=True).values()]
        return max((m.nbytes for m in peaks), default=0)

    def encoders(self, most: int) -> int:
        """Most inner chunks one task may encode at once within ``max_mem`` (1 to ``most``).

        See :meth:`~shardpipe.core.memory.MemoryModel.encoders_within`.
        """
        return self.model.encoders_within(self.max_mem, self.max_projected_mem, most)

    def __repr__(self) -> str:
        return (
            f"WritePlan(shape={self.layout.shape}, region={self.placement.region}, "
            f"shards={self.layout.shard_shape}, chunks={self.layout.chunk_shape}, "
            f"n_shards={self.n_shards}, multipart_shards={self.n_multipart_shards}, "
            f"part_chunks={self.part_chunks}, num_tasks={self.num_tasks}, "
            f"max_projected_mem={format_bytes(self.max_projected_mem)}, "
            f"max_mem={format_bytes(self.max_mem)})"
        )


def plan_write(
    placement: Placement,
    itemsize: int,
    max_mem: int,
    *,
    model: MemoryModel | None = None,
    max_parts: int | None = None,
    stamp_nbytes: int = 0,
    max_part_nbytes: int | None = None,
) -> WritePlan:
    """Plan the write of the blocks of ``placement`` into its region of the array.

    Parameters
    ----------
    placement : Placement
        The source's blocks placed in the target array
        (``Placement.whole(layout, blocks)`` for a new array).
    itemsize : int
        Bytes per element.
    max_mem : int
        Memory budget per task in bytes.
    model : MemoryModel, optional
        How much each task holds; by default raw-sized encodings and no
        buffer joins.
    max_parts : int, optional
        Most parts one shard may have (9,998 on S3).
    stamp_nbytes : int
        Bytes a stamp task holds (the index, padded as the store needs).
    max_part_nbytes : int, optional
        Raw bytes a part may hold at most, below what ``max_mem`` allows: a
        rechunk caps parts at one block's share of a shard, so that each
        part is written from one block as soon as it is read, and no block
        waits in memory for the others of its shard.

    Raises
    ------
    MemoryBudgetError
        If some task cannot fit ``max_mem``; the message names the task kind,
        the excess and the fix.
    PlanError
        If a shard would need more parts than the store allows.
    """
    layout = placement.layout
    chunk_nbytes = math.prod(layout.chunk_shape) * itemsize
    if model is None:
        model = MemoryModel(chunk_nbytes)
    block_nbytes = placement.blocks.max_block_elements * itemsize
    budget = model.largest_part(max_mem, block_nbytes, gathered=False)
    if budget < chunk_nbytes:
        if block_nbytes >= chunk_nbytes:
            raise MemoryBudgetError(
                "write-shard",
                model.direct(block_nbytes, chunk_nbytes),
                max_mem,
                f"the largest Dask block holds {block_nbytes:,} bytes; "
                + (
                    # a command chooses its blocks, but for `shardpipe plan --blocks`
                    f"raise {advice.name('max_mem')} (with `shardpipe plan`, or give smaller "
                    "--blocks)"
                    if advice.for_command_line()
                    else f"rechunk the source into smaller blocks or raise {advice.name('max_mem')}"
                ),
            )
        raise MemoryBudgetError(
            "write-part",
            model.direct(block_nbytes, chunk_nbytes),
            max_mem,
            f"one inner chunk {layout.chunk_shape} is {chunk_nbytes:,} bytes; raise "
            f"{advice.name('max_mem')} or use smaller chunks",
        )
    if stamp_nbytes > max_mem:
        raise MemoryBudgetError(
            "stamp-shard",
            stamp_nbytes,
            max_mem,
            "the shard index (with the padding the store needs) must fit; raise "
            + advice.name("max_mem"),
        )
    alignment = block_alignment(layout, placement.blocks)

    def sized(raw_budget: int) -> WritePlan:
        if max_part_nbytes is not None:
            raw_budget = max(chunk_nbytes, min(raw_budget, max_part_nbytes))
        part_chunks = choose_part_chunks(layout, itemsize, raw_budget, alignment)
        return WritePlan(placement, itemsize, max_mem, model, part_chunks, stamp_nbytes, max_parts)

    # parts that lie in one block each need no room for pieces: try that first
    plan = sized(budget)
    if plan.totals.n_gathered_parts:
        budget = model.largest_part(max_mem, block_nbytes, gathered=True)
        if budget < chunk_nbytes:
            raise MemoryBudgetError(
                "write-part",
                model.gathered(chunk_nbytes),
                max_mem,
                f"a part gathered from several Dask blocks holds its pieces, the assembled "
                f"inner chunks and their encoding; one inner chunk {layout.chunk_shape} is "
                f"{chunk_nbytes:,} bytes: raise {advice.name('max_mem')}, use smaller chunks, "
                "or align the Dask blocks with the inner chunks",
            )
        plan = sized(budget)
    if max_parts is not None and plan.max_parts_per_shard > max_parts:
        raise PlanError(
            f"shard {plan.totals.most_parts_shard} needs {plan.max_parts_per_shard} parts "
            f"under {advice.valued('max_mem', str(max_mem))}, more than the store allows "
            f"({max_parts}); raise {advice.name('max_mem')} or use smaller shards"
        )
    fix = f"raise {advice.name('max_mem')}, or use smaller Dask blocks or inner chunks"
    if model.min_part_nbytes and plan.n_multipart_shards:
        fix += (
            f" (the store pads every part of a shard written in parts to "
            f"{model.min_part_nbytes:,} bytes)"
        )
    check_budget(plan.projected_peaks(), max_mem, fix)
    check_budget(plan.projected_peaks(in_process=True), max_mem, fix)
    return plan
