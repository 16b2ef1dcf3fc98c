"""The memory model: bytes each kind of task holds at its peak, checked against ``max_mem``.

Every figure is an upper bound of the data a task holds at once, in bytes.
Interpreter and allocator overhead is not modelled (a few MiB per worker), nor
are the chunks a rechunk's source read fetches at once before decoding them
(:mod:`shardpipe.stored.region_reads`: up to 16 MiB per reading thread from a local
disk, 64 MiB from an object store).

Terms::

    block      the largest Dask block feeding the task (raw)
    raw(p)     raw bytes of the inner chunks of part p (full chunk shapes)
    enc(x)     encoded bytes of raw bytes x: x * expansion + overhead per chunk
    working    one inner chunk being encoded: its padded copy, its contiguous
               copy and each codec stage's output (3 x chunk x expansion)
    join       one extra copy of the encoded object when the backend joins
               buffers before sending them (S3, zarr stores); 0 on a file
               system, which writes the buffers as they are
    undo       an update that may overwrite bytes in place (a file system,
               write_strategy "in_place" or "auto") keeps the old bytes of
               every range it overwrites, its undo record: up to enc(raw(p));
               0 for new writes
    padded     a part of a shard written in parts is at least the store's
               smallest part (5 MiB on S3): enc(raw) counts as that at least

Per task kind::

    write-shard / write-part, direct    block + enc(raw(p)) + join + undo + working
    encode-piece                        block + enc(raw(p)) + working
    write-shard / write-part, gathered  pieces (<= enc(raw(p))) + canvas raw(p)
                                         + enc(raw(p)) + join + undo + working
    ... gathered in the task            every feeding block + canvas raw(p)
        (local schedulers)               + enc(raw(p)) + join + undo + working
    stamp-shard                         head + tail (the index, padded)

Writing adds nothing to these figures on a file system: a shard's task
writes its chunks itself, as it encodes them, and keeps them until the
shard is durable so that a retry never encodes twice: that is the
enc(raw(p)) already counted. On an object store a task joins its encoded
shard into the one object S3 sends, hands it to its process's uploads and returns
(:mod:`shardpipe.storage.uploads`): what they hold in flight is bounded by
``max_mem`` of its own, so a process holds at most one ``max_mem`` per task
thread plus one for its uploads.

A part gathered in its own task (no piece tasks; only on schedulers in this
process, where blocks do not travel) holds all its blocks at once; a plan
uses that path for a part only where it fits the budget.

Encoding on idle cores: a task may encode up to ``e`` of its chunks at once
(:mod:`shardpipe.engine.encoders`), each holding one ``working``; its peak is
then the figure above plus ``(e - 1) x working``. ``e`` is the largest that
keeps the write's highest projected peak within the budget
(:meth:`MemoryModel.encoders_within`), 1 when there is no room.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from shardpipe.errors import MemoryBudgetError

DEFAULT_MAX_MEM = "1GiB"
"""Default memory budget per task (the ``max_mem`` of every front door)."""

TASK_KINDS = ("write-shard", "encode-piece", "write-part", "stamp-shard")
"""Task kinds whose memory the model projects."""

HOLD_SHARE = 1.5
"""Blocks waiting between tasks for the tasks that gather them may hold this many ``max_mem``.

A one-pass rechunk (:mod:`shardpipe.rechunking.memory`) and the levels of a
pyramid (:mod:`shardpipe.ome.level_blocks`) read blocks in order, a few
ahead of the tasks taking them; what waits is counted in the plan and kept
under this share of ``max_mem``. With what the running tasks hold besides
(their parts, encoded bytes and codec copies), the process stays under
twice ``max_mem`` on two threads (``tests/rechunking/test_rechunk_memory.py``,
``tests/ome/test_pyramid_memory.py``)."""


@dataclass(frozen=True)
class MemoryModel:
    """Projected peak bytes of each task kind of a write.

    Parameters
    ----------
    chunk_nbytes : int
        Raw bytes of one inner chunk.
    expansion : float
        Most encoded bytes per raw byte the inner codecs can produce (above
        1 for codecs that widen the data or add headers).
    chunk_overhead : int
        Most bytes the codecs add to one inner chunk besides ``expansion``.
    join_copies : bool
        Whether the backend copies an object's buffers into one before
        sending it.
    min_part_nbytes : int
        The store's smallest part: parts of shards written in parts are
        padded to it.
    undo : bool
        Whether a task keeps the old bytes it overwrites (an update in place).
    """

    chunk_nbytes: int
    expansion: float = 1.0
    chunk_overhead: int = 0
    join_copies: bool = False
    min_part_nbytes: int = 0
    undo: bool = False

    def encoded(self, raw: int, *, padded: bool = False) -> int:
        """Most encoded bytes of ``raw`` raw bytes of whole inner chunks (a padded part's size)."""
        n_chunks = math.ceil(raw / self.chunk_nbytes) if self.chunk_nbytes else 0
        nbytes = math.ceil(raw * self.expansion) + n_chunks * self.chunk_overhead
        return max(nbytes, self.min_part_nbytes) if padded else nbytes

    @property
    def working(self) -> int:
        """Bytes held while one inner chunk is encoded."""
        return math.ceil(3 * self.chunk_nbytes * self.expansion) + self.chunk_overhead

    @property
    def _copies(self) -> int:
        """Copies of the encoded part a writing task holds (backend join, undo record)."""
        return 1 + int(self.join_copies) + int(self.undo)

    def _out(self, raw: int, padded: bool) -> int:
        """The encoded part as written, the backend's copy of it, the old bytes it replaces."""
        written = self.encoded(raw, padded=padded)
        return written * self._copies

    def direct(self, block: int, part_raw: int, *, padded: bool = False) -> int:
        """A part cut, encoded and written by the task holding its one block."""
        return block + self._out(part_raw, padded) + self.working

    def piece(self, block: int, part_raw: int) -> int:
        """A block encoding what it holds of a part, where it lives."""
        return block + self.encoded(part_raw) + self.working

    def gathered(self, part_raw: int, *, padded: bool = False) -> int:
        """A part assembled from the pieces its blocks sent, then encoded and written."""
        return self.encoded(part_raw) + part_raw + self._out(part_raw, padded) + self.working

    def gathered_in_task(self, blocks: int, part_raw: int, *, padded: bool = False) -> int:
        """A part whose task cuts all its blocks itself (schedulers in this process)."""
        return blocks + part_raw + self._out(part_raw, padded) + self.working

    def encoders_within(self, budget: int, peak: int, most: int) -> int:
        """Most chunks a task whose serial peak is ``peak`` may encode at once within ``budget``.

        Each chunk encoded beside the first holds one more :attr:`working`.
        Between 1 and ``most``.
        """
        if most <= 1 or peak >= budget:
            return 1
        return max(1, min(most, 1 + (budget - peak) // max(self.working, 1)))

    @staticmethod
    def stamp(head: int, tail: int) -> int:
        """The task writing a shard's index and publishing the shard."""
        return head + tail

    def largest_part(self, budget: int, block: int, *, gathered: bool = True) -> int:
        """Most raw bytes a part may hold so that its tasks fit ``budget``.

        Direct parts must fit; with ``gathered``, parts assembled from pieces
        too. Returns 0 when not even an empty part fits.
        """
        fixed = self.working
        # the cost is the linear solution's plus the per-chunk overhead and roundings,
        # and grows with raw: the largest raw that fits is found below the solution
        limits = [(budget - block - fixed) / (self.expansion * self._copies)]
        if gathered:
            limits.append((budget - fixed) / (1 + self.expansion * (1 + self._copies)))

        def cost(raw: int) -> int:
            return max(self.direct(block, raw), self.gathered(raw) if gathered else 0)

        fits, above = 0, max(0, int(min(limits))) + 1
        if cost(fits) > budget:
            return 0
        while above - fits > 1:  # cost(fits) fits, cost(above) does not (or is untried)
            middle = (fits + above) // 2
            fits, above = (middle, above) if cost(middle) <= budget else (fits, middle)
        return above if cost(above) <= budget else fits


@dataclass(frozen=True)
class TaskMemory:
    """The projected peak of one task kind and the task that reaches it.

    Parameters
    ----------
    kind : str
        Task kind, one of :data:`TASK_KINDS`.
    nbytes : int
        Projected peak bytes.
    where : str
        Which task reaches it (a shard and part), for messages.
    """

    kind: str
    nbytes: int
    where: str


def check_budget(peaks: dict[str, TaskMemory], budget: int, fix: str) -> None:
    """Raise :class:`~shardpipe.errors.MemoryBudgetError` for the worst task over ``budget``."""
    over = [m for m in peaks.values() if m.nbytes > budget]
    if over:
        worst = max(over, key=lambda m: m.nbytes)
        raise MemoryBudgetError(f"{worst.kind} ({worst.where})", worst.nbytes, budget, fix)
