"""``verify``: check every shard present in a sharded Zarr v3 array.

The shards are found by listing the array's shard prefix
(:mod:`shardpipe.stored.listing`), never by walking the grid, so that a
sparse array of millions of shards, or a ``zarr.json`` declaring a shape of
``2**40`` along each axis, costs what its stored shards cost; the absent
ones are counted. A key under the prefix that names no shard of the grid is
a problem. The checks run in batches on the ``distributed`` cluster when a
client is active, else on threads; a report lists the shards with a problem
and the first :data:`~shardpipe.maintenance.verification.SHARD_ENTRIES` checked clean, and counts
the rest.

Each shard object is checked by :mod:`shardpipe.stored.shard_integrity` (its index,
its chunk ranges, every inner chunk; a failing chunk is named by its
coordinates, slot and shard key, with the cause in words). Where the inner
chunks carry no checksum (arrays written with ``chunk_checksums=False`` or
by other writers), the report says that bit flips inside compressed chunks
cannot all be detected: many decode without error to wrong values.

A hierarchy of the sharding storage-transformer draft (before ``migrate``)
is checked the same way: each array's draft document is translated to the
v3 metadata it would get, and its shards under ``data/root/`` are read with
the draft's shard format (:mod:`shardpipe.legacy.hierarchy`); arrays v3
cannot express are reported as skipped, with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from zarr.storage import MemoryStore

from shardpipe import advice
from shardpipe.codec.chunk_codec import ChunkCodec
from shardpipe.core.checks import check_bool, check_int
from shardpipe.core.display import ShowsSummary, Summary, format_count, format_nbytes
from shardpipe.core.grid import Coords, Shape
from shardpipe.engine.shard_sweep import checked_shards
from shardpipe.errors import ShardFormatError
from shardpipe.formats.zarr_sharding import ZarrShardingFormat
from shardpipe.internals.zarr_core import ArrayV3Metadata
from shardpipe.journal.leftovers import unfinished_work
from shardpipe.journal.markers import JobKeys
from shardpipe.journal.undo import undo_records
from shardpipe.journal.unfinished import UnfinishedJob, job_folder, unfinished_lines
from shardpipe.maintenance.targets import over_target
from shardpipe.maintenance.unfinished import only_records, unfinished_jobs
from shardpipe.ome.group_checks import ome_problems
from shardpipe.precomputed.check import PrecomputedReport, check_volume
from shardpipe.storage.remembered import remembering
from shardpipe.storage.resolve import ResolvedStore, resolve_store
from shardpipe.stored.listing import Listed
from shardpipe.stored.metadata import layout_of, open_array_metadata
from shardpipe.stored.places import check_not_a_file
from shardpipe.stored.shard_integrity import (
    ChunkFailure,
    ShardCheck,
    checksum_note,
)
from shardpipe.write.options import STORED_PARAMETERS
from shardpipe.write.parameters import shares_parameters

__all__ = ["SHARD_ENTRIES", "VerifyReport", "verify"]

SHARD_ENTRIES = 10_000
"""Shards checked clean that a report lists one by one (per array); the others are only counted.

Shards with a problem are always listed."""


@dataclass(repr=False)
class VerifyReport(ShowsSummary):
    """The outcome of :func:`verify`.

    Its ``repr`` is short (the problems first, then the counts; every
    problem is in :attr:`problems`); ``str`` is the full account the command
    line prints; notebooks show an HTML table.

    Only the shards present are checked (they are found by listing the
    array's shard prefix); the absent ones are counted,
    ``n_shards - shards_present``, and read as the fill value.

    Attributes
    ----------
    shards : list of ShardCheck
        The shards checked, in grid order (of every array, for a group): every
        one with a problem, and the first :data:`~shardpipe.maintenance.verification.SHARD_ENTRIES`
        checked clean (per array; ``shards_left_out`` counts the rest); then an entry per
        key under the shard prefix that is no shard of the grid, and per
        absent shard an interrupted update left (both problems).
    arrays : dict
        For a group: the report of each sharded array, by store path.
    skipped : dict
        For a group: arrays that are not sharded Zarr v3 arrays, with the reason.
    notes : list of str
        What the checks could not establish, which is not a problem found:
        that the inner chunks carry no checksum, so that bit flips inside
        compressed chunks cannot all be detected; traces of an unfinished
        job (without ``complete``).
    job_problems : list of (str, str)
        With ``complete``: ``(key, problem)`` for each trace of an unfinished
        job (:mod:`shardpipe.journal.leftovers`) and each interrupted job; an
        OME-Zarr image's own record of an unfinished job always.
    interrupted : list of UnfinishedJob
        Every interrupted job whose record is at the location or in its
        arrays (:func:`~shardpipe.maintenance.unfinished.unfinished_jobs`),
        printed as ``info`` prints them.
    n_shards : int
        Shards in the grid (of every array, for a group).
    shards_present : int
        Shard objects found and checked.
    chunks_stored : int
        Inner chunks their indexes point at.
    nbytes : int
        Bytes of all shard objects.
    unused_nbytes : int
        Of those, bytes no index points at (``compact`` reclaims them).
    shards_left_out : int
        Shards checked clean and not listed in ``shards``.
    """

    shards: list[ShardCheck]
    arrays: dict[str, VerifyReport] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    job_problems: list[tuple[str, str]] = field(default_factory=list)
    interrupted: list[UnfinishedJob] = field(default_factory=list)
    n_shards: int = 0
    shards_present: int = 0
    chunks_stored: int = 0
    nbytes: int = 0
    unused_nbytes: int = 0
    shards_left_out: int = 0

    @property
    def problems(self) -> list[tuple[str, str]]:
        """Every ``(key, problem)`` found."""
        return [(s.key, p) for s in self.shards for p in s.problems] + self.job_problems

    @property
    def chunk_failures(self) -> list[ChunkFailure]:
        """Every inner chunk that does not decode, with its coordinates, slot, shard and cause."""
        return [f for s in self.shards for f in s.chunk_failures]

    @property
    def ok(self) -> bool:
        """Whether no problem was found."""
        return not self.problems

    @property
    def shards_absent(self) -> int:
        """Shards of the grid with no object (they read as the fill value)."""
        return self.n_shards - self.shards_present

    @property
    def unused_ratio(self) -> float:
        """Share of the shard bytes no index points at (``compact`` reclaims them)."""
        return self.unused_nbytes / self.nbytes if self.nbytes else 0.0

    def _summary(self) -> Summary:
        bad = sum(1 for s in self.shards if s.problems)
        rows = [
            (
                "shards",
                f"{format_count(self.n_shards)} in grid, {format_count(self.shards_present)} "
                f"present, {format_count(self.shards_absent)} absent",
            ),
            ("with problems", f"{format_count(bad)} shard(s)"),
            ("inner chunks stored", format_count(self.chunks_stored)),
            ("bytes", self._bytes_text()),
        ]
        if self.arrays or self.skipped:
            rows.insert(0, ("arrays", f"{len(self.arrays)} checked, {len(self.skipped)} skipped"))
        if self.notes:
            rows.append(("notes", f"{len(self.notes)} (see .notes)"))
        return Summary(
            "VerifyReport",
            "OK" if self.ok else "FAILED",
            rows,
            [f"{key}: {problem}" for key, problem in self.problems[:20]],
            len(self.problems),
        )

    def _bytes_text(self) -> str:
        return (
            f"{format_nbytes(self.nbytes)}, {format_nbytes(self.unused_nbytes)} unused "
            f"({self.unused_ratio:.1%})"
        )

    def __str__(self) -> str:
        if self.arrays or self.skipped:
            return self._group_str()
        return self._array_str()

    def _group_str(self) -> str:
        lines = []
        for path, report in self.arrays.items():
            lines.append(
                f"{path}: {report.shards_present:,}/{report.n_shards:,} shards, "
                f"{format_nbytes(report.nbytes)}, {len(report.problems):,} problem(s) "
                f"{'OK' if report.ok else 'FAILED'}"
            )
            lines += [f"  note: {note}" for note in report.notes]
        lines += [f"{path}: skipped ({reason})" for path, reason in self.skipped.items()]
        total = self._array_str().splitlines()
        return "\n".join([*lines, f"total over {len(self.arrays)} sharded array(s):", *total])

    def _array_str(self) -> str:
        lines = [
            f"shards: {self.n_shards:,} in grid, {self.shards_present:,} present, "
            f"{self.shards_absent:,} absent (read as fill value)",
            f"inner chunks stored: {self.chunks_stored:,}",
            f"bytes: {self._bytes_text()}",
        ]
        if self.shards_left_out:
            lines.append(
                f"listed: every shard with a problem and the first {SHARD_ENTRIES:,} checked "
                f"clean; {self.shards_left_out:,} more checked clean are only counted"
            )
        if not self.arrays:
            lines += [f"note: {note}" for note in self.notes]
        lines += unfinished_lines(self.interrupted)
        bad = [s for s in self.shards if s.problems]
        in_shards = sum(len(s.problems) for s in bad)
        elsewhere = len(self.problems) - in_shards  # of interrupted jobs, stray keys
        where = [f"{in_shards:,} in {len(bad):,} shard(s)"] if bad else []
        where += [f"{elsewhere:,} elsewhere"] if elsewhere else []
        lines.append(
            f"problems: {len(self.problems):,}" + (f" ({', '.join(where)})" if where else "")
        )
        shown = {(job.key, job.describe()) for job in self.interrupted}
        listed = [p for p in self.problems if p not in shown]  # printed with the jobs above
        for key, problem in listed[:50]:
            lines.append(f"  {key}: {problem}")
        if len(listed) > 50:
            lines.append(f"  ... and {len(listed) - 50:,} more")
        lines.append("OK" if self.ok else "FAILED")
        return "\n".join(lines)


UNDO_PROBLEM = (
    "left mid-update by an interrupted job (an undo record exists); run `shardpipe repair` "
    "to restore it"
)


def _grid_order(check: ShardCheck) -> tuple[bool, Coords, str]:
    return (check.coords is None, check.coords or (), check.key)


class _Tally:
    """Totals of the checks of one array, with the entries its report keeps.

    Of the shards checked clean it keeps the first
    :data:`~shardpipe.maintenance.verification.SHARD_ENTRIES` in grid order (checks arrive in any
    order: past twice that many, the kept ones are sorted and cut back).
    """

    def __init__(self, undone: set[str], grid: Shape) -> None:
        self.report = VerifyReport([])
        self.undone = undone
        self.grid = grid
        self.clean: list[ShardCheck] = []
        self.temporaries = 0
        self.temporary: list[str] = []  # the first few, named in the finding

    def add(self, check: ShardCheck) -> None:
        report = self.report
        if check.key in self.undone:
            self.undone.discard(check.key)
            check.problems.append(UNDO_PROBLEM)
        if check.present:
            report.shards_present += 1
            report.chunks_stored += check.chunks_stored
            report.nbytes += check.nbytes
            report.unused_nbytes += check.unused_bytes
        if check.problems:
            report.shards.append(check)
            return
        self.clean.append(check)
        if len(self.clean) >= 2 * SHARD_ENTRIES:
            self._cut()

    def _cut(self) -> None:
        if len(self.clean) > SHARD_ENTRIES:
            self.clean.sort(key=_grid_order)
            self.report.shards_left_out += len(self.clean) - SHARD_ENTRIES
            del self.clean[SHARD_ENTRIES:]

    def other(self, listed: Listed) -> None:
        if listed.temporary:
            self.temporaries += 1
            if len(self.temporary) < 3:
                self.temporary.append(listed.key)
            return
        if listed.beyond:
            problem = (
                f"past the end of the array's {self.grid} grid of shards, so zarr never reads "
                "it: a shard written by an append that stopped before it grew the array; run "
                f"that append again with {advice.setting('resume')} (which keeps it), or remove "
                "it"
            )
        else:
            problem = (
                f"not a shard of the array: the key names no shard of its {self.grid} grid of "
                "shards, so zarr never reads it; remove it if nothing else needs it"
            )
        self.report.shards.append(ShardCheck(listed.key, problems=[problem]))

    def finish(self, n_shards: int) -> VerifyReport:
        report = self.report
        report.n_shards = n_shards
        self._cut()
        report.shards += self.clean
        report.shards += [ShardCheck(key, problems=[UNDO_PROBLEM]) for key in sorted(self.undone)]
        report.shards.sort(key=_grid_order)
        return report

    def leftovers(self) -> list[tuple[str, str]]:
        """``(key, finding)`` for the temporary files unfinished writes left among the shards."""
        if not self.temporaries:
            return []
        more = ", ..." if self.temporaries > len(self.temporary) else ""
        return [
            (
                self.temporary[0],
                f"{self.temporaries} temporary file(s) of unfinished writes lie among the "
                f"shards ({', '.join(self.temporary)}{more}); run `shardpipe cleanup`",
            )
        ]


@shares_parameters(STORED_PARAMETERS)
def verify(
    store: Any,
    path: str | None = None,
    *,
    storage_options: dict[str, Any] | None = None,
    workers: int = 8,
    complete: bool = False,
    progress: bool = False,
) -> VerifyReport | PrecomputedReport:
    """Check every shard present in the sharded array (or every array of the group) at ``path``.

    A sharded Neuroglancer precomputed volume (an ``info`` file at ``path``)
    is checked by :func:`shardpipe.precomputed.check.check_volume` and gives
    a :class:`~shardpipe.precomputed.check.PrecomputedReport`.

    The shards are found by listing the keys under the array's shard prefix,
    so that the work and the memory grow with the shards stored, not with
    the grid: absent shards are counted, not visited. A key under that
    prefix that names no shard of the grid is a problem. When a
    ``distributed`` client is active, the shards are checked on its cluster
    in tasks of up to :data:`~shardpipe.engine.shard_sweep.TASK_SHARDS` shards;
    otherwise (and for a zarr ``MemoryStore``, which lives in this process)
    on ``workers`` threads.

    Parameters
    ----------
    complete : bool
        Also require that no job is unfinished: a job record of a write that
        did not finish, staging data, temporary files among the shards or a
        job marker are problems (without it they are notes). See
        :mod:`shardpipe.journal.leftovers`.

    Returns
    -------
    VerifyReport
        ``report.ok`` is False when any shard has a problem; ``str(report)``
        is a short human-readable summary. Past
        :data:`~shardpipe.maintenance.verification.SHARD_ENTRIES` shards checked clean, the report
        counts them without listing them. ``report.interrupted`` lists the
        interrupted jobs recorded at the location and in its arrays
        (:mod:`shardpipe.maintenance.unfinished`); where such a job left only
        its records (killed before it wrote any metadata), they are the
        report's problems.
    """
    complete = check_bool("complete", complete)
    progress = check_bool("progress", progress)
    workers = check_int("workers", workers, example=8)
    target = remembering(resolve_store(store, path, storage_options))  # documents read once
    check_not_a_file(target, "path" if path else "store")
    if jobs := only_records(target):  # nothing to check but what an interrupted job left
        problems = [(job.key, job.describe()) for job in jobs]
        return VerifyReport([], job_problems=problems, interrupted=jobs)
    report = over_target(
        target,
        "path" if path else "store",
        volume=lambda volume, found: check_volume(volume, found, decode=True),
        array=lambda at: _verify_array(
            at.target,
            workers,
            complete,
            progress,
            metadata=at.metadata,
            shard_format=at.shard_format,
        ),
        arrays=_verified_together,
        image=lambda group, arrays, skipped: _verified_together(
            arrays, skipped, ome_problems(group)
        ),
    )
    if isinstance(report, VerifyReport):  # a group's own (an array's are in already)
        found = set(report.interrupted)
        _add_group_jobs(report, [j for j in unfinished_jobs(target) if j not in found], complete)
    return report


def _add_group_jobs(report: VerifyReport, jobs: list[UnfinishedJob], complete: bool) -> None:
    """Add the interrupted jobs recorded at a group itself (before its arrays')."""
    report.interrupted[:0] = jobs
    if complete:
        known = set(report.job_problems)
        report.job_problems += [
            (job.key, job.describe()) for job in jobs if (job.key, job.describe()) not in known
        ]


def _verified_together(
    arrays: dict[str, VerifyReport],
    skipped: dict[str, str],
    group_problems: list[tuple[str, str]] | None = None,
) -> VerifyReport:
    """One report for the arrays of a group or a draft hierarchy; ``group_problems``
    are the group's own (an OME-Zarr image group's, :mod:`shardpipe.ome.group_checks`)."""
    shards = [check for report in arrays.values() for check in report.shards]
    notes = [f"{path}: {note}" for path, report in arrays.items() for note in report.notes]
    job_problems = [p for report in arrays.values() for p in report.job_problems]
    job_problems += group_problems or []
    return VerifyReport(
        shards,
        arrays,
        skipped,
        notes,
        job_problems,
        [job for report in arrays.values() for job in report.interrupted],
        n_shards=sum(r.n_shards for r in arrays.values()),
        shards_present=sum(r.shards_present for r in arrays.values()),
        chunks_stored=sum(r.chunks_stored for r in arrays.values()),
        nbytes=sum(r.nbytes for r in arrays.values()),
        unused_nbytes=sum(r.unused_nbytes for r in arrays.values()),
        shards_left_out=sum(r.shards_left_out for r in arrays.values()),
    )


def _verify_array(
    target: ResolvedStore,
    workers: int,
    complete: bool = False,
    progress: bool = False,
    *,
    metadata: ArrayV3Metadata | None = None,
    shard_format: ZarrShardingFormat | None = None,
) -> VerifyReport:
    """Check the array at ``target``; ``metadata`` and ``shard_format`` are a draft array's."""
    if metadata is None:
        metadata = open_array_metadata(target)  # MetadataError if zarr.json is broken
    fix = f"make a sharded copy with {advice.job('rechunk')}"
    if not isinstance(metadata, ArrayV3Metadata):
        raise ShardFormatError(f"verify checks Zarr v3 arrays sharded with sharding_indexed; {fix}")
    try:
        layout = layout_of(metadata)
    except ShardFormatError as err:
        raise ShardFormatError(f"{err}; {fix}") from err
    undone = {record.key for _, record in undo_records(target.shards, JobKeys(target.key("")))}
    tally = _Tally(undone, layout.shard_grid)
    # a MemoryStore lives here: tasks on worker processes would each carry a copy of it
    cluster = not isinstance(target.zarr_store, MemoryStore)
    checks = checked_shards(
        target,
        metadata,
        workers,
        cluster=cluster,
        progress=progress,
        others=tally.other,
        shard_format=shard_format,
    )
    for check in checks:
        tally.add(check)
    report = tally.finish(layout.n_shards)
    note = checksum_note(ChunkCodec.from_metadata(metadata))
    if note is not None and report.chunks_stored:
        report.notes.append(note)
    folder = job_folder(target)  # listed once for both
    findings = tally.leftovers() + unfinished_work(target, folder)
    report.interrupted = unfinished_jobs(target, folder)
    if complete:
        report.job_problems += findings
        report.job_problems += [(job.key, job.describe()) for job in report.interrupted]
    else:
        report.notes += [f"{key}: {finding}" for key, finding in findings]
    return report
