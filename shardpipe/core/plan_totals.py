"""A write plan's counts and projected peaks, added up shard by shard or class by class.

:class:`TotalsBuilder` takes shard plans, each with how many shards it
stands for (1 when walking every shard, a class's size when walking the
classes of :mod:`shardpipe.core.shard_classes`), and adds up what the plan's
summary shows: tasks per kind, parts, inner chunks, and the projected peak
memory of each task kind with the task that reaches it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from shardpipe.core.grid import Coords
from shardpipe.core.memory import MemoryModel, TaskMemory
from shardpipe.core.shard_plan import ShardPlan


@dataclass(frozen=True)
class PlanTotals:
    """What a whole write plan adds up to.

    Parameters
    ----------
    task_counts : dict of str to int
        Tasks per kind in a graph for any scheduler (pieces for gathered parts).
    task_counts_in_process : dict of str to int
        Tasks per kind in a graph for a scheduler in this process.
    n_parts : int
        Parts over all shards.
    n_multipart_shards : int
        Shards written in several parts and stamped.
    max_parts_per_shard : int
        Most parts of one shard.
    most_parts_shard : tuple of int or None
        A shard with that many parts.
    n_gathered_parts : int
        Parts fed by more than one Dask block.
    n_chunks_touched : int
        Inner chunks the region touches.
    n_chunks_full : int
        Inner chunks it covers fully (encoded afresh).
    peaks : dict of str to TaskMemory
        Projected peak per task kind on any scheduler.
    peaks_in_process : dict of str to TaskMemory
        The same on a scheduler in this process.
    n_classes : int
        Shard plans the totals were added up from.
    """

    task_counts: dict[str, int] = field(default_factory=dict)
    task_counts_in_process: dict[str, int] = field(default_factory=dict)
    n_parts: int = 0
    n_multipart_shards: int = 0
    max_parts_per_shard: int = 0
    most_parts_shard: Coords | None = None
    n_gathered_parts: int = 0
    n_chunks_touched: int = 0
    n_chunks_full: int = 0
    peaks: dict[str, TaskMemory] = field(default_factory=dict)
    peaks_in_process: dict[str, TaskMemory] = field(default_factory=dict)
    n_classes: int = 0


class TotalsBuilder:
    """Add up shard plans into :class:`PlanTotals`.

    Parameters
    ----------
    model : MemoryModel
        How much each task holds.
    chunk_nbytes : int
        Raw bytes of one inner chunk.
    stamp_nbytes : int
        Bytes a stamp task holds.
    """

    def __init__(self, model: MemoryModel, chunk_nbytes: int, stamp_nbytes: int) -> None:
        self._model = model
        self._chunk_nbytes = chunk_nbytes
        self._stamp_nbytes = stamp_nbytes
        self._counts: Counter[str] = Counter()
        self._counts_in_process: Counter[str] = Counter()
        self._peaks: dict[str, TaskMemory] = {}
        self._peaks_in_process: dict[str, TaskMemory] = {}
        self._n_parts = 0
        self._n_multipart = 0
        self._most_parts = 0
        self._most_parts_shard: Coords | None = None
        self._n_gathered = 0
        self._touched = 0
        self._full = 0
        self._n_classes = 0

    def add(self, shard: ShardPlan, count: int = 1) -> None:
        """Count ``shard``'s plan ``count`` times (the shards it stands for)."""
        self._n_classes += 1
        single = shard.is_single_part
        n_parts = len(shard.parts)
        kind = "write-shard" if single else "write-part"
        for counts in (self._counts, self._counts_in_process):
            counts[kind] += n_parts * count
            if not single:
                counts["begin-shard"] += count
                counts["stamp-shard"] += count
        self._n_parts += n_parts * count
        self._n_multipart += 0 if single else count
        if n_parts > self._most_parts:
            self._most_parts, self._most_parts_shard = n_parts, shard.coords
        self._touched += shard.coverage.touched.n_chunks * count
        self._full += shard.coverage.n_full * count
        self._add_peaks(shard, kind, count)

    def _add_peaks(self, shard: ShardPlan, kind: str, count: int) -> None:
        model, padded = self._model, not shard.is_single_part
        both = (self._peaks, self._peaks_in_process)
        if padded:
            stamp = model.stamp(self._stamp_nbytes, 0)
            _note(both, "stamp-shard", stamp, f"shard {shard.coords}")
        for part in shard.parts:
            where = f"shard {shard.coords}, part {part.number}"
            raw = part.chunks.n_chunks * self._chunk_nbytes
            blocks = part.blocks_nbytes
            if part.is_direct:
                _note(both, kind, model.direct(blocks[0], raw, padded=padded), where)
                continue
            self._n_gathered += count
            self._counts["encode-piece"] += len(part.blocks) * count
            # pieces on any scheduler; in this process only where the task cannot cut its blocks
            with_pieces = [self._peaks]
            if part.gather_in_task:
                held = model.gathered_in_task(sum(blocks), raw, padded=padded)
                _note([self._peaks_in_process], kind, held, where)
            else:
                self._counts_in_process["encode-piece"] += len(part.blocks) * count
                with_pieces.append(self._peaks_in_process)
            _note(with_pieces, kind, model.gathered(raw, padded=padded), where)
            _note(with_pieces, "encode-piece", model.piece(max(blocks), raw), where)

    def result(self) -> PlanTotals:
        """The totals of every shard plan added so far."""
        return PlanTotals(
            task_counts=dict(self._counts),
            task_counts_in_process=dict(self._counts_in_process),
            n_parts=self._n_parts,
            n_multipart_shards=self._n_multipart,
            max_parts_per_shard=self._most_parts,
            most_parts_shard=self._most_parts_shard,
            n_gathered_parts=self._n_gathered,
            n_chunks_touched=self._touched,
            n_chunks_full=self._full,
            peaks=self._peaks,
            peaks_in_process=self._peaks_in_process,
            n_classes=self._n_classes,
        )


def _note(tables: Iterable[dict[str, TaskMemory]], kind: str, nbytes: int, where: str) -> None:
    """Record ``nbytes`` for ``kind`` in each table where it is the largest so far."""
    for table in tables:
        known = table.get(kind)
        if known is None or nbytes > known.nbytes:
            table[kind] = TaskMemory(kind, nbytes, where)
