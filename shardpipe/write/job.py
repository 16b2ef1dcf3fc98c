"""The job protocol, its one runner, and the write job: a planned write to hold, show and run.

**The protocol and the runner.** Every job of shardpipe (an array write, a
rechunk, a group rechunk, an OME-Zarr write, update or conversion, a dataset
write) is a value that says what it will do (``summary_rows``; ``repr`` and
the notebook table) and the **passes** it runs (:meth:`Job.passes`). A pass
begins (it may create groups or copy data first) and hands the runner the
array writes (:class:`~shardpipe.write.spec.WriteSpec`) to run; the runner
runs the writes of the same pass of every job together
(:func:`~shardpipe.write.run.execute_together`: one streamed computation, the
arrays sharing the workers), then ends the pass with its writes' reports. A
job's second pass begins only when its first ended, so a pass can read what
the one before wrote (the intermediate copy of a two-pass rechunk).

:func:`run_jobs` is the only place that runs passes and the only place that
holds the Icechunk commit bracket: ``commit`` and ``rebase`` are checked
against the jobs' target before anything is written, and the session is
committed once, after every pass of every job ended. A composite job (a
group rechunk, a pyramid, a dataset) is made of whole jobs
(:func:`together`): it runs them through the same protocol and never reads
their fields.

**The write job.**

:func:`~shardpipe.write.prepare.prepare_write` checks every argument, resolves the
store, builds the array's metadata in memory and plans the write (a new array,
a region of an existing one, or an append), writing nothing. The
:class:`ShardedWrite` it returns shows the plan (``print(job)``, or a table
in a notebook), runs it (:meth:`ShardedWrite.execute`), or hands it over as a
Dask ``Delayed`` (:meth:`ShardedWrite.to_delayed`). ``to_sharded_zarr`` is
``prepare_write(...).execute()``.

While it runs, a job holds the array's marker (:mod:`shardpipe.journal.markers`): a
new array is created after it is taken, an update checks that ``zarr.json``
did not change since planning, and an append publishes the grown metadata
after every shard.

A job runs in waves of shards (:mod:`shardpipe.core.waves`,
:mod:`shardpipe.engine.streaming`): each wave's graph is built from the source when
the wave is about to run, so neither the client nor the scheduler ever holds
the graph of a whole petabyte array. A small write is one wave.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from itertools import zip_longest
from typing import Any, Protocol, runtime_checkable

import zarr
from dask.delayed import Delayed, delayed
from zarr.storage import StorePath

from shardpipe.core.checks import check_bool
from shardpipe.core.display import html_table, text_table
from shardpipe.engine.graph import build_write_graph
from shardpipe.engine.reports import WriteReport
from shardpipe.errors import InvalidArgumentError
from shardpipe.internals.zarr_core import AsyncArray
from shardpipe.storage.icechunk.store import IcechunkShardStore
from shardpipe.storage.resolve import ResolvedStore
from shardpipe.write.arguments import check_run
from shardpipe.write.options import RUN_PARAMETERS
from shardpipe.write.parameters import shares_parameters
from shardpipe.write.run import execute_together
from shardpipe.write.spec import WriteSpec, summary_rows


@dataclass(frozen=True, repr=False)
class ShardedWrite(WriteSpec):
    """A write of a Dask array into a sharded Zarr v3 array, validated and planned.

    Made by :func:`~shardpipe.write.prepare.prepare_write`; nothing is written
    until :meth:`execute` runs or the :meth:`to_delayed` result is computed.
    Its attributes are those of :class:`~shardpipe.write.spec.WriteSpec`.
    """

    def summary_rows(self) -> list[tuple[str, str]]:
        """The plan's summary as ``(label, value)`` rows (what ``repr`` and the HTML show)."""
        return summary_rows(self)

    def __repr__(self) -> str:
        return text_table("ShardedWrite", self.summary_rows())

    def _repr_html_(self) -> str:
        return html_table("ShardedWrite", self.summary_rows())

    def to_delayed(self) -> Delayed:
        """Return the write as a ``dask.delayed.Delayed``; nothing is written until it is computed.

        Its first task writes the metadata (after checking the target once
        more); every task touching storage waits for it. It computes to a
        :class:`~shardpipe.engine.reports.WriteReport`. Piece tasks encode where the
        blocks live, so the graph suits every scheduler. After a failed
        computation, :func:`shardpipe.cleanup` removes what it left.

        The graph holds every shard of the write at once; :meth:`execute`
        runs large writes wave by wave instead (see
        :meth:`~shardpipe.write.spec.WriteSpec.wave_schedule`).
        """
        self.mode.check_delayed()
        if self.target.transactional:
            raise InvalidArgumentError(
                "compute",
                "False, but a write into an Icechunk session runs at once: the changes its "
                "tasks make come back and are merged into the session in this process",
                "Use compute=True (or ShardedWrite.execute())",
            )
        token = uuid.uuid4().hex
        # the job begins as execute() begins it, in a task, holding no marker
        target_d = delayed(self.mode.begin, pure=False)(
            self.target,
            self.write_target(token),
            self.metadata,
            None,
            token,
            dask_key_name=f"{self.mode.begin_task}-{token}",
        )
        skip = self.shards_left_alone()  # one graph: the done waves left out shard by shard
        graph = build_write_graph(self.source, self.plan, target_d, self.key_of(), token, skip=skip)
        return self.mode.end_delayed(graph.result, self.target, self.n_shards_skipped, token)

    @shares_parameters(RUN_PARAMETERS)
    def execute(
        self, *, progress: bool = False, commit: str | None = None, rebase: bool = False
    ) -> WriteReport:
        """Write the metadata, then every shard; return what was written.

        Parameters
        ----------

        Returns
        -------
        WriteReport
            Shards written and left out as empty, bytes, inner chunks,
            seconds (with ``commit``, the new snapshot's ``snapshot_id``).

        Raises
        ------
        shardpipe.errors.ArrayExistsError
            If a node appeared at the target since planning and ``overwrite``
            is False.
        shardpipe.errors.TransactionConflictError
            If the commit lost a race with another (see :mod:`shardpipe.write.job`).
        Exception
            Whatever a task raised; shards already published stay, staging and
            unfinished uploads are removed first (a failure of that cleanup is
            added to the error's notes, never in its place). Into an Icechunk
            session, nothing of a failed write's shards reaches the session.
        """
        return run_job(self, progress=progress, commit=commit, rebase=rebase)

    def passes(self) -> list[Pass]:
        """One pass: this write (see :mod:`shardpipe.write.job`)."""
        return [Pass("write", lambda _: [self])]

    def finish(self, reports: PassReports, seconds: float, snapshot_id: str | None) -> WriteReport:
        """The write's report, with the snapshot the run committed (if any)."""
        return replace(reports[0][0], snapshot_id=snapshot_id)

    def open(self) -> zarr.Array[Any]:
        """Open the written array for reading and writing.

        The array's metadata is the job's (written by it, or found by it),
        so the array is made from it without reading ``zarr.json`` again
        (about a millisecond a call: much of a small update's time).
        """
        where = StorePath(self.target.zarr_store, self.target.path)
        return zarr.Array(AsyncArray(metadata=self.metadata, store_path=where))


PassReports = Sequence[Sequence[WriteReport]]
"""Per pass of a job, in order, the reports of the writes the pass handed the runner."""


def _no_writes(_: bool) -> Sequence[WriteSpec]:
    return ()


def _nothing(_: Any) -> None:
    return None


@dataclass(frozen=True)
class Pass:
    """One pass of a job.

    Attributes
    ----------
    name : str
        What the pass does, for plans and progress (``"copy into the intermediate"``).
    begin : callable
        Called with ``progress`` (whether to show progress bars): does what
        must come before the pass's writes (create groups, copy a source) and
        returns the writes to run, in order (possibly none).
    end : callable
        Called with the reports of those writes, in the same order, once
        they all succeeded.
    abandon : callable
        Called with the error when the pass (of this job or of another job
        run together) fails after ``begin`` was called: it cleans up what
        only this job knows of (an intermediate copy it placed). The writes
        clean up after themselves.
    write : callable or None
        A pass that writes by itself, without a Dask graph (a batch of region
        writes): called with ``progress`` after the computation of the
        pass's writes; the reports it returns follow theirs among the
        pass's reports.
    """

    name: str
    begin: Callable[[bool], Sequence[WriteSpec]] = _no_writes
    end: Callable[[Sequence[WriteReport]], None] = _nothing
    abandon: Callable[[BaseException], None] = _nothing
    write: Callable[[bool], Sequence[WriteReport]] | None = None


@runtime_checkable
class Job[R](Protocol):
    """What :func:`run_jobs` runs: a planned job of any kind.

    Jobs are made by the ``plan_*``/``prepare_*`` functions; nothing is
    written before they run.
    """

    @property
    def target(self) -> ResolvedStore:
        """Where the job writes (an Icechunk commit, if asked for, goes there)."""
        ...

    def summary_rows(self) -> list[tuple[str, str]]:
        """The plan as ``(label, value)`` rows."""
        ...

    def passes(self) -> Sequence[Pass]:
        """The passes the job runs, in order (planned, not yet begun)."""
        ...

    def finish(self, reports: PassReports, seconds: float, snapshot_id: str | None) -> R:
        """The job's report, from its passes' reports, the time taken and the commit's snapshot."""
        ...


@dataclass(frozen=True)
class RunOptions:
    """How jobs run, checked: made by :func:`check_run_options` (or by a front door from the
    values it checked itself); the runner trusts them.

    Attributes
    ----------
    progress : bool
        Show a progress bar over the shards of each pass.
    commit : str or None
        Into an Icechunk session: commit it with this message at the end.
    rebase : bool
        With ``commit``: rebase onto commits that reached the branch meanwhile.
    """

    progress: bool = False
    commit: str | None = None
    rebase: bool = False


def check_run_options(
    target: ResolvedStore, progress: Any = False, commit: Any = None, rebase: Any = False
) -> RunOptions:
    """Check ``progress``, ``commit`` and ``rebase`` of jobs writing to ``target``, once.

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        Naming the option refused (``commit`` and ``rebase`` first, as
        :func:`~shardpipe.write.arguments.check_run` checks them).
    """
    message, rebase = check_run(commit, rebase, target)
    return RunOptions(check_bool("progress", progress), message, rebase)


def run_jobs(
    jobs: Sequence[Job[Any]],
    *,
    progress: bool = False,
    commit: str | None = None,
    rebase: bool = False,
) -> list[Any]:
    """Run jobs together, pass by pass; commit once; return each job's report in order.

    Pass ``k`` of every job that has one runs in one computation, after every
    job's pass ``k - 1`` ended. If a pass fails, every job whose pass began
    abandons it (in order) and the error is raised; nothing is committed.
    The options are checked first (:func:`check_run_options`); a front door
    that checked them already calls :func:`run_checked`.

    Parameters
    ----------
    jobs : sequence of Job
        Jobs on distinct arrays (one target each; with ``commit``, all into
        the same Icechunk session).
    progress : bool
        Show a progress bar over the shards of each pass.
    commit : str, optional
        Into an Icechunk session: commit it with this message at the end.
    rebase : bool
        With ``commit``: rebase onto commits that reached the branch meanwhile.
    """
    if not jobs:
        return []
    return run_checked(jobs, check_run_options(jobs[0].target, progress, commit, rebase))


def run_checked(jobs: Sequence[Job[Any]], run: RunOptions) -> list[Any]:
    """:func:`run_jobs` with options checked already."""
    if not jobs:
        return []
    target = jobs[0].target
    began = time.perf_counter()
    plans = [list(job.passes()) for job in jobs]
    done: list[list[Sequence[WriteReport]]] = [[] for _ in jobs]
    for number in range(max(len(p) for p in plans)):
        running = [(i, p[number]) for i, p in enumerate(plans) if number < len(p)]
        begun: list[tuple[int, Pass, Sequence[WriteSpec]]] = []
        try:
            for i, step in running:
                begun.append((i, step, step.begin(run.progress)))
            writes = [w for _, _, ws in begun for w in ws]
            reports = iter(execute_together(writes, progress=run.progress) if writes else [])
            own = {i: list(step.write(run.progress)) for i, step, _ in begun if step.write}
        except BaseException as err:
            for _, step, _ in begun:
                step.abandon(err)
            if len(begun) < len(running):  # the pass that raised in begin cleans up too
                running[len(begun)][1].abandon(err)
            raise
        for i, step, ws in begun:
            mine = [next(reports) for _ in ws] + own.get(i, [])
            step.end(mine)
            done[i].append(mine)
    snapshot = _commit(target, run.commit, run.rebase) if run.commit is not None else None
    seconds = time.perf_counter() - began
    return [job.finish(d, seconds, snapshot) for job, d in zip(jobs, done, strict=True)]


def run_job[R](
    job: Job[R], *, progress: bool = False, commit: Any = None, rebase: Any = False
) -> R:
    """Run one job (see :func:`run_jobs`); return its report."""
    report: R = run_jobs([job], progress=progress, commit=commit, rebase=rebase)[0]
    return report


def run_checked_job[R](job: Job[R], run: RunOptions) -> R:
    """Run one job with options checked already (see :func:`run_checked`); return its report."""
    report: R = run_checked([job], run)[0]
    return report


def _commit(target: ResolvedStore, message: str, rebase: bool) -> str:
    """Commit the session the jobs wrote into; return the new snapshot's id.

    Raises
    ------
    shardpipe.errors.TransactionConflictError
        If another commit reached the branch first (and, with ``rebase``,
        changed a shard these jobs changed); nothing is committed.
    """
    shards = target.shards
    assert isinstance(shards, IcechunkShardStore)
    return shards.commit(message, rebase=rebase)


@dataclass
class _Together:
    """The passes of several jobs merged index by index, and their reports split back."""

    jobs: Sequence[Job[Any]]
    before: Callable[[], None] | None
    counts: list[list[tuple[int, int]]] = field(default_factory=list)
    """Per job, per pass: its writes' reports and its own (``Pass.write``) reports."""

    def passes(self) -> list[Pass]:
        plans = [list(job.passes()) for job in self.jobs]
        self.counts = [[] for _ in self.jobs]
        merged = []
        for number, steps in enumerate(zip_longest(*plans)):
            present = [(i, s) for i, s in enumerate(steps) if s is not None]
            merged.append(self._merge(number, present))
        if not merged and self.before is not None:
            merged.append(self._merge(0, []))
        return merged

    def _merge(self, number: int, present: list[tuple[int, Pass]]) -> Pass:
        before = self.before if number == 0 else None

        def begin(progress: bool) -> Sequence[WriteSpec]:
            if before is not None:
                before()
            writes: list[WriteSpec] = []
            for i, step in present:
                mine = step.begin(progress)
                self.counts[i].append((len(mine), 0))
                writes.extend(mine)
            return writes

        def write(progress: bool) -> list[WriteReport]:
            reports: list[WriteReport] = []
            for i, step in present:
                if step.write is not None:
                    mine = list(step.write(progress))
                    self.counts[i][-1] = (self.counts[i][-1][0], len(mine))
                    reports.extend(mine)
            return reports

        def end(reports: Sequence[WriteReport]) -> None:
            for (_, step), mine in zip(present, self._split(reports, number), strict=True):
                step.end(mine)

        def abandon(err: BaseException) -> None:
            for _, step in present:
                step.abandon(err)

        names = ", ".join(dict.fromkeys(s.name for _, s in present)) or "prepare"
        writes_itself = any(s.write is not None for _, s in present)
        return Pass(names, begin, end, abandon, write if writes_itself else None)

    def _split(self, reports: Sequence[WriteReport], number: int) -> list[list[WriteReport]]:
        """The reports of merged pass ``number`` split by job (the jobs present in it).

        The merged pass's reports are those of every job's writes, then
        those the jobs' passes made by themselves (``Pass.write``).
        """
        present = [c[number] for c in self.counts if number < len(c)]
        graph = iter(reports[: sum(n for n, _ in present)])
        own = iter(reports[sum(n for n, _ in present) :])
        return [[next(graph) for _ in range(n)] + [next(own) for _ in range(m)] for n, m in present]

    def split(self, reports: PassReports) -> list[list[Sequence[WriteReport]]]:
        """Each job's pass reports, from the merged passes' reports."""
        out: list[list[Sequence[WriteReport]]] = [[] for _ in self.jobs]
        for number, merged in enumerate(reports):
            jobs = [i for i, c in enumerate(self.counts) if number < len(c)]
            for i, mine in zip(jobs, self._split(merged, number), strict=True):
                out[i].append(mine)
        return out


def together(
    jobs: Sequence[Job[Any]], before: Callable[[], None] | None = None
) -> tuple[Callable[[], list[Pass]], Callable[[PassReports, float, str | None], list[Any]]]:
    """The passes of a composite made of whole ``jobs``, and how it finishes them.

    Returns ``(passes, finish)``: ``passes()`` merges the jobs' passes index
    by index (pass ``k`` of each runs in the composite's pass ``k``), after
    ``before`` (what the composite writes first, e.g. its groups) at the start
    of the first; ``finish(reports, seconds, snapshot_id)`` hands each job its
    own reports and returns each job's report, in order.
    """
    merged = _Together(jobs, before)

    def finish(reports: PassReports, seconds: float, snapshot_id: str | None) -> list[Any]:
        return [
            job.finish(mine, seconds, snapshot_id)
            for job, mine in zip(jobs, merged.split(reports), strict=True)
        ]

    return merged.passes, finish
