"""What writes report: ``WriteReport``, added up over tasks, waves and jobs.

Adding reports also merges what their tasks wrote into a transactional
backend (an Icechunk session: :mod:`shardpipe.storage.icechunk.store`), so the
same sums that count shards carry the changes back to the client.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from shardpipe.core.display import (
    ShowsSummary,
    Summary,
    format_bytes,
    format_count,
    format_nbytes,
)
from shardpipe.storage.base import Changes
from shardpipe.storage.uploads import Ticket


@dataclass(frozen=True)
class PassReport:
    """What one pass of a job of several passes did (a two-pass rechunk).

    Attributes
    ----------
    name : str
        What the pass did (``"copy into the intermediate"``).
    seconds : float
        Its wall time.
    reads : int
        Source read units (chunks, or shards of a sharded source) it read
        and decoded, counting a unit once per block that read it; those of
        this run only (a resumed run reads no block it keeps, nor any that
        feeds only the complete shards it skips).
    nbytes_read : int
        Raw bytes of those reads.
    nbytes_stored : int
        Bytes it stored (for the copy: the intermediate's chunks).
    location : str or None
        Where it stored them (the intermediate copy's path or URL).
    blocks : int
        Blocks it copied (the copy) or read (the pass from the copy), in this run.
    blocks_kept : int
        Blocks a killed run had copied already, kept by ``resume=True``.
    removed : bool
        Whether what it stored was deleted once the next pass ended.
    """

    name: str
    seconds: float
    reads: int = 0
    nbytes_read: int = 0
    nbytes_stored: int = 0
    location: str | None = None
    blocks: int = 0
    blocks_kept: int = 0
    removed: bool = False

    def _what(self) -> str:
        kept = f", {self.blocks_kept:,} kept from an earlier run" if self.blocks_kept else ""
        reads = f", {self.reads:,} reads ({format_bytes(self.nbytes_read)})" if self.reads else ""
        return f"{self.name}: {self.seconds:.2f} s, {self.blocks:,} blocks{kept}{reads}"

    def _where(self) -> str:
        fate = "deleted" if self.removed else "kept"
        return f"{format_bytes(self.nbytes_stored)} at {self.location} ({fate})"

    def rows(self, label: str) -> list[tuple[str, str]]:
        """Its lines in a report's summary: what it did, and where it stored what it did."""
        rows = [(label, self._what())]
        if self.location is not None:
            rows.append(("stored", self._where()))
        return rows

    def __str__(self) -> str:
        return self._what() + (f"; {self._where()}" if self.location is not None else "")


@dataclass(frozen=True, repr=False)
class WriteReport(ShowsSummary):
    """What a write (or one of its publishing tasks) did.

    Attributes
    ----------
    shards : int
        Shards handled: written, or left out because every inner chunk the
        write gave them equals the fill value.
    shards_empty : int
        Of those, shards left out as empty (nothing written).
    nbytes : int
        Bytes written to shard objects (index and padding included): whole
        new shards, or what updates wrote into existing ones.
    chunks_stored : int
        Inner chunks stored in the shards written.
    seconds : float
        Wall time of the whole write (0 in the reports of single tasks).
    strategies : mapping of str to int
        For updates of existing arrays: shards per way they were changed
        (``"new"``, ``"in_place"``, ``"append"``, ``"rewrite"``,
        ``"unchanged"``).
    retries : int
        Storage operations tried again after a transient fault (see
        :mod:`shardpipe.storage.retry`).
    shards_skipped : int
        Shards left alone because they were complete already (a resumed write).
    snapshot_id : str or None
        The Icechunk snapshot the write committed (``commit="message"``).
    intermediate_nbytes : int
        For a rechunk in two passes: the bytes the first pass stored in the
        intermediate copy (deleted when the second pass ended).
    passes : tuple of PassReport
        For a job of several passes (a two-pass rechunk): what each pass did,
        in order; ``seconds`` then covers them all, and the other fields
        count the last pass's writes.
    changes : Changes or None
        What the tasks wrote into a transactional backend (an Icechunk
        session), still to be merged into it; ``None`` once merged. Adding
        reports merges their changes (the left one's are reused).
    uploads : tuple of Ticket
        Uploads its tasks handed on (:mod:`shardpipe.storage.uploads`) and
        the run has not settled yet: the shards they carry count as written
        only once settled (:func:`~shardpipe.engine.reports.settled`).
    """

    shards: int = 0
    shards_empty: int = 0
    nbytes: int = 0
    chunks_stored: int = 0
    seconds: float = 0.0
    strategies: Mapping[str, int] = field(default_factory=dict)
    retries: int = 0
    shards_skipped: int = 0
    snapshot_id: str | None = None
    intermediate_nbytes: int = 0
    passes: tuple[PassReport, ...] = ()
    changes: Changes | None = field(default=None, repr=False, compare=False)
    uploads: tuple[Ticket, ...] = field(default=(), repr=False, compare=False)

    @property
    def shards_written(self) -> int:
        """Shards published at their keys."""
        return self.shards - self.shards_empty

    def __add__(self, other: WriteReport) -> WriteReport:
        return WriteReport(
            shards=self.shards + other.shards,
            shards_empty=self.shards_empty + other.shards_empty,
            nbytes=self.nbytes + other.nbytes,
            chunks_stored=self.chunks_stored + other.chunks_stored,
            seconds=max(self.seconds, other.seconds),
            strategies=dict(Counter(self.strategies) + Counter(other.strategies)),
            retries=self.retries + other.retries,
            shards_skipped=self.shards_skipped + other.shards_skipped,
            intermediate_nbytes=self.intermediate_nbytes + other.intermediate_nbytes,
            passes=self.passes + other.passes,
            changes=_merged(self.changes, other.changes),
            uploads=self.uploads + other.uploads,
        )

    def _summary(self) -> Summary:
        rows = [
            ("shards written", format_count(self.shards_written)),
            ("left out as empty", format_count(self.shards_empty)),
            ("inner chunks stored", format_count(self.chunks_stored)),
            ("bytes", format_nbytes(self.nbytes)),
        ]
        if self.seconds:
            rows.append(("seconds", f"{self.seconds:.2f}{self._rate()}"))
        if self.strategies:
            rows.append(("updates", self._strategies()))
        if self.shards_skipped:
            rows.append(("complete already", f"{format_count(self.shards_skipped)} shard(s)"))
        if self.retries:
            rows.append(("storage retries", format_count(self.retries)))
        for number, done in enumerate(self.passes, 1):
            rows.extend(done.rows(f"pass {number} of {len(self.passes)}"))
        if self.intermediate_nbytes and not self.passes:
            rows.append(("pass 1", f"{format_nbytes(self.intermediate_nbytes)} copied (deleted)"))
        if self.snapshot_id:
            rows.append(("snapshot", self.snapshot_id))
        return Summary("WriteReport", None, rows)

    def _rate(self) -> str:
        if not self.seconds:
            return ""
        rate = self.nbytes / 1e6 / self.seconds  # two figures below 10 MB/s, not "0 MB/s"
        return f", {rate:,.0f} MB/s stored" if rate >= 10 else f", {rate:.2g} MB/s stored"

    def _strategies(self) -> str:
        return ", ".join(f"{k} {n:,}" for k, n in sorted(self.strategies.items()))

    def __str__(self) -> str:
        rate = self._rate()
        how = self._strategies()
        return (
            f"{self.shards_written:,} shard(s) written, {self.shards_empty:,} left out as "
            f"empty, {self.chunks_stored:,} inner chunks, {format_nbytes(self.nbytes)}"
            + (f" in {self.seconds:.2f} s{rate}" if self.seconds else "")
            + (f" ({how})" if how else "")
            + (
                f"; {self.shards_skipped:,} complete already, skipped"
                if self.shards_skipped
                else ""
            )
            + (f"; {self.retries:,} storage retries" if self.retries else "")
            + (
                f"; pass 1 copied {format_nbytes(self.intermediate_nbytes)} into the "
                "intermediate (deleted)"
                if self.intermediate_nbytes and not self.passes
                else ""
            )
            + "".join(
                f"; pass {n} of {len(self.passes)} ({p})" for n, p in enumerate(self.passes, 1)
            )
            + (f"; committed as snapshot {self.snapshot_id}" if self.snapshot_id else "")
        )


def _merged(first: Changes | None, second: Changes | None) -> Changes | None:
    if first is None:
        return second
    return first if second is None else first.merged(second)


def add_reports(*reports: WriteReport) -> WriteReport:
    """Add up reports (one level of the tree that merges a transactional write's changes)."""
    return sum(reports, WriteReport())


def settled(report: WriteReport, retries: int) -> WriteReport:
    """``report`` once its uploads ended, with the ``retries`` they made."""
    return replace(report, uploads=(), retries=report.retries + retries)
