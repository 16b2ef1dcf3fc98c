"""Running write jobs: one streamed computation for one or several arrays.

:func:`execute_together` takes each job's marker, writes or checks its
metadata, then runs the jobs' waves one after another
(:func:`~shardpipe.engine.streaming.run_waves`: each wave's graph built while the
one before runs, small waves of several jobs together), records each wave
of a new array as done in its job record once it is (so that a resumed
write starts at the first wave not done), and on failure rolls back what
the jobs left mid-update before the error is raised.
``ShardedWrite.execute`` is ``execute_together([job])``: a job is a
:class:`~shardpipe.write.spec.WriteSpec`. A lone update of a few shards
from a NumPy array runs in the calling thread instead of on a scheduler
(:func:`run_in_thread`), between the same marker and records.

Starting a job (:func:`start`) takes the array's marker and writes or checks
its metadata, and makes a :class:`StartedJob` whose waves' graphs are built
when asked for. New arrays written on a scheduler in this process start in
the background (:class:`StartInBackground`): their blocks are computed and
encoded while the marker, job record and ``zarr.json`` are written, and
nothing of theirs reaches the store before those are there. After a failure,
:func:`~shardpipe.journal.undo.undo_failed` says what is left and rolls back shards left mid-update.

Small updates run in the calling thread, with no Dask graph and the same
records as with one: an update of one shard, or a few, from data already in
memory (a NumPy array) costs more to schedule than to do. The shards' tasks
are called one after another (their inner chunks still encoded several at
once on idle cores, :mod:`shardpipe.engine.encoders`); everything that makes
an update crash-safe is the task's own and happens exactly as on a
scheduler: the job holds the array's marker, each shard is changed behind
its undo record (in place or appended) or by one conditional put, and each
finished shard is recorded for ``resume``. :func:`run_batch` runs a batch of
region writes (:func:`shardpipe.write_regions`) the same way: one marker, one
writer per shard, no graph.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, replace
from functools import partial

import numpy as np

from shardpipe.codec.chunk_codec import ChunkCodec
from shardpipe.core.grid import Box, Coords
from shardpipe.core.region_batch import ChunkFill
from shardpipe.core.shard_update import DEFAULT_UNUSED_THRESHOLD
from shardpipe.core.waves import WaveSchedule
from shardpipe.engine.batch_tasks import update_shard_from_regions
from shardpipe.engine.graph import build_write_graph
from shardpipe.engine.heap import in_heap_scope
from shardpipe.engine.publish_tasks import finish_write
from shardpipe.engine.reports import WriteReport
from shardpipe.engine.scheduler import cluster_threads, runs_in_process
from shardpipe.engine.streaming import WaveGraph, run_waves
from shardpipe.engine.tasks import WriteTarget
from shardpipe.engine.update_tasks import UpdateTarget, update_shard
from shardpipe.journal.array_lock import release
from shardpipe.journal.markers import JobKeys, JobMarker
from shardpipe.journal.undo import undo_failed
from shardpipe.storage.gated import GatedStore
from shardpipe.storage.keys import STAGING_DIR
from shardpipe.storage.resolve import ResolvedStore
from shardpipe.stored.metadata import format_of, layout_of
from shardpipe.write.arguments import ExistingArray
from shardpipe.write.spec import WriteSpec
from shardpipe.write.update_mode import take_for_update

log = logging.getLogger("shardpipe")


def execute_together(jobs: Sequence[WriteSpec], *, progress: bool = False) -> list[WriteReport]:
    """Run several write jobs as one computation; return their reports in order.

    All shards of all jobs go to the scheduler at once, so the arrays of a
    dataset share the workers. Jobs whose sources share blocks (``shared_source``:
    the levels of a pyramid) run in one batch, so that each block is computed
    once. Each job holds its array's marker throughout.
    If any task fails, every job rolls back the shards it left mid-update and
    removes its staging data before the error is raised.

    Parameters
    ----------
    jobs : sequence of WriteSpec
        Jobs on distinct arrays.
    progress : bool
        Show one progress bar over the shards of all jobs (checked by the caller).
    """
    began = time.perf_counter()
    token = uuid.uuid4().hex
    started: list[StartedJob] = []
    ending: dict[str, Callable[[], None]] = {}  # the last work of the jobs that finished
    failed = True  # until the last job finished
    background: StartInBackground | None = None
    direct = None if progress else in_memory_source(jobs)
    try:
        if direct is None and _starts_early(jobs):
            background = StartInBackground(
                lambda gate: [
                    start_later(job, f"{token}-{number}", uploads=token, gate=gate)
                    for number, job in enumerate(jobs)
                ]
            )
            started = background.jobs
        else:
            for number, job in enumerate(jobs):
                started.append(start(job, f"{token}-{number}", uploads=token))

        def record_wave(wave: WaveGraph) -> None:
            if background is not None:
                background.wait()  # a wave that stored nothing ends before the start may
            job = started[wave.job]
            if job.schedule.n_waves > 1:
                job.job.mode.wave_done(job.job.target, job.schedule.max_shards, wave.wave + 1)

        try:
            if direct is not None:  # a small update from memory: no graph
                totals = [run_in_thread(started[0], direct)]
            else:
                totals = run_waves(
                    (w for n, s in enumerate(started) for w in s.wave_graphs(n)),
                    len(started),
                    show=progress,
                    token=token,
                    total_shards=sum(s.n_shards_to_write for s in started),
                    total_waves=sum(len(s.waves_to_run) for s in started),
                    on_wave_done=record_wave,
                    together=any(s.job.shared_source for s in started),
                )
            if background is not None:
                started = background.wait()
        except BaseException as err:
            if background is not None:
                failure = background.failed()
                if failure is not None:  # nothing was written: its tasks' stores wait for it
                    raise failure from (None if failure is err else err)
                started = background.jobs
            for s in started:
                assert s.marker is not None
                what_now = s.job.mode.what_now(s.job.target)
                undo_failed(s.job.target.shards, s.job.keys, err, s.marker, what_now)
            raise
        results = []
        for s, total in zip(started, totals, strict=True):
            report = finish_write(s.write_target, total)
            if report.changes is not None:  # a transactional backend: into the session
                s.job.target.shards.merge_changes(report.changes)
                report = replace(report, changes=None)
            ending[s.token] = partial(s.job.mode.end, s.job.target)
            results.append(replace(report, shards_skipped=s.job.n_shards_skipped))
        failed = False
    finally:
        _release_all(started, ending, failed=failed)
    seconds = time.perf_counter() - began
    results = [replace(report, seconds=seconds) for report in results]
    for report in results:
        log.info("shardpipe: %s", report)
    return results


def _release_all(
    started: Sequence[StartedJob], ending: dict[str, Callable[[], None]], *, failed: bool
) -> None:
    """Let go of every job's marker, last taken first, its job's ``ending`` done meanwhile.

    Every marker is let go whatever fails. The first error is raised once all
    were tried, unless the run ``failed`` already (its own error is the one
    raised then); the others are logged.
    """
    first: BaseException | None = None
    for s in reversed(started):
        if s.marker is None:  # a start in the background that failed
            continue
        try:
            release(s.job.target.shards, s.job.keys, s.marker, meanwhile=ending.get(s.token))
        except BaseException as err:
            if first is None and not failed:
                first = err
            else:
                log.error("shardpipe: letting go of %s failed: %r", s.job.target.path, err)
    if first is not None:
        raise first


def _starts_early(jobs: Sequence[WriteSpec]) -> bool:
    """Whether the jobs' markers and metadata can be written while their graphs run.

    Kinds of write that may (new arrays: an update reads the array under its
    marker), outside transactions, on a scheduler in this process: the tasks'
    stores wait for the start there (:mod:`shardpipe.storage.gated`).
    """
    return all(
        job.mode.starts_early and not job.target.transactional and runs_in_process(job.source)
        for job in jobs
    )


@dataclass(frozen=True)
class StartedJob:
    """A job whose marker is taken and whose metadata is written (see :mod:`shardpipe.write.run`).

    Parameters
    ----------
    job : WriteSpec
        The job.
    marker : JobMarker or None
        The array's marker it holds; None until :func:`take` took it.
    write_target : WriteTarget
        Where and how its tasks write.
    target : WriteTarget or UpdateTarget
        What its graph's tasks get (an update's target for an update).
    token : str
        Unique id of this run of the job, in its tasks' names.
    threads : int or None
        Worker threads of the ``distributed`` cluster it runs on, if any.
    schedule : WaveSchedule
        Its waves.
    """

    job: WriteSpec
    marker: JobMarker | None
    write_target: WriteTarget
    target: WriteTarget | UpdateTarget
    token: str
    threads: int | None
    schedule: WaveSchedule

    @property
    def waves_to_run(self) -> range:
        """Numbers of the waves this run writes (a resumed job skips the done ones)."""
        return range(min(self.job.first_wave, self.schedule.n_waves), self.schedule.n_waves)

    @property
    def n_shards_to_write(self) -> int:
        """Shards this run publishes."""
        plan = self.job.plan
        return plan.n_shards - self.job.n_shards_skipped

    def wave_graphs(self, index: int) -> Iterator[WaveGraph]:
        """Build each wave's graph when it is asked for; ``index`` is the job's position."""
        job, plan = self.job, self.job.plan
        per_shard = plan.num_tasks / max(plan.n_shards, 1)
        in_process = runs_in_process(job.source)
        whole = self.schedule.n_waves == 1
        for number in self.waves_to_run:
            wave = self.schedule.wave(number)
            graph = build_write_graph(
                job.source,
                plan,
                self.target,
                job.key_of(),
                self.token if whole else f"{self.token}-w{number}",
                in_process=in_process,
                update=job.mode.updates,
                skip=job.skip,
                threads=self.threads,
                wave=None if whole else wave,
                shared_source=job.shared_source,
            )
            n_tasks = math.ceil(wave.n_shards * per_shard)
            yield WaveGraph(index, number, graph.publishing, n_tasks, graph.blocks)


def start(spec: WriteSpec, token: str, *, uploads: str = "") -> StartedJob:
    """Take the array's marker and begin the job (its ``mode``'s way); the graphs come later.

    Parameters
    ----------
    spec : WriteSpec
        The job.
    token : str
        Unique id of this run, in its tasks' names and its staging area.
    uploads : str
        The group of the run that settles the uploads its tasks hand on
        (:meth:`~shardpipe.write.spec.WriteSpec.write_target`).
    """
    return take(start_later(spec, token, uploads=uploads))


def start_later(
    spec: WriteSpec, token: str, *, uploads: str = "", gate: Future[None] | None = None
) -> StartedJob:
    """A job with what its graphs need, its marker not taken yet: no I/O.

    :func:`take` then takes the marker and begins the job. With ``gate``
    (kinds of write that start early: :attr:`~shardpipe.write.modes.WriteMode.starts_early`),
    its tasks' store waits for it (:mod:`shardpipe.storage.gated`): the
    graphs may run while :func:`take` does, on another thread.
    """
    assert gate is None or spec.mode.starts_early, "this job begins before its graphs run"
    write_target = spec.write_target(token, uploads=uploads)
    if gate is not None:
        write_target = replace(write_target, store=GatedStore(write_target.store, gate))
    threads = cluster_threads()
    schedule = spec.wave_schedule(threads)
    return StartedJob(spec, None, write_target, write_target, token, threads, schedule)


def take(started: StartedJob) -> StartedJob:
    """Take the marker of a job from :func:`start_later` and begin it.

    :meth:`~shardpipe.write.modes.WriteMode.take`: a new array is created, a
    resumed write's record compared again, an update's ``zarr.json`` checked
    (its tasks then get an update target).
    """
    spec = started.job
    marker, target = spec.mode.take(spec.target, spec.keys, started.write_target, spec.metadata)
    return replace(started, marker=marker, target=target)


class StartInBackground:
    """Start new arrays' jobs on a thread of their own while their graphs run.

    The jobs come from :func:`start_later` with ``gate``: their tasks
    compute and encode at once, and their stores wait for the gate, which
    opens once every job's marker is taken and metadata written (in job
    order, as :func:`start` would). If one start fails, the markers already
    taken are let go and the gate carries the error: nothing was written.

    Parameters
    ----------
    make : callable
        Given the gate, returns the jobs from :func:`start_later`.
    """

    def __init__(self, make: Callable[[Future[None]], list[StartedJob]]) -> None:
        self.gate: Future[None] = Future()
        self.jobs = make(self.gate)
        self._thread = threading.Thread(target=self._take_all, name="shardpipe-start")
        self._thread.start()

    def _take_all(self) -> None:
        taken: list[StartedJob] = []
        try:
            for job in self.jobs:
                taken.append(take(job))
        except BaseException as err:
            for job in reversed(taken):
                assert job.marker is not None
                release(job.job.target.shards, job.job.keys, job.marker)
            self.gate.set_exception(err)
            return
        self.jobs = taken
        self.gate.set_result(None)

    def wait(self) -> list[StartedJob]:
        """The jobs with their markers, once taken; raises the start's error if one failed."""
        self._thread.join()
        self.gate.result()
        return self.jobs

    def failed(self) -> BaseException | None:
        """The start's error, once it ended (None when it succeeded)."""
        self._thread.join()
        return self.gate.exception()


IN_THREAD_MAX_SHARDS = 8
"""Most shards an update from a NumPy array may touch to run in the calling thread."""


def in_memory_source(jobs: Sequence[WriteSpec]) -> np.ndarray | None:
    """The NumPy source of a lone small update that can run in the calling thread, else None.

    That is one job, an update (a region write or an append) of at most
    :data:`IN_THREAD_MAX_SHARDS` shards from a NumPy array, outside an
    Icechunk session (whose writes are collected task by task).
    """
    if len(jobs) != 1:
        return None
    job = jobs[0]
    source = job.mode.in_memory  # an update's only
    if source is None or job.target.transactional:
        return None
    if job.plan.n_shards - job.n_shards_skipped > IN_THREAD_MAX_SHARDS:
        return None
    return source


def run_in_thread(started: StartedJob, source: np.ndarray) -> WriteReport:
    """Run the started update ``started`` from ``source`` in this thread; add up its reports.

    Each shard's ``update-shard`` task is called with the whole source as
    its one block (the task cuts the inner chunks it needs from it).
    """
    job, target = started.job, started.target
    assert isinstance(target, UpdateTarget)
    plan, key_of = job.plan, job.key_of()
    region = plan.placement.region
    reports = []
    for shard in plan.iter_shards():
        if shard.coords in job.skip:
            continue
        reports.append(
            in_heap_scope(
                update_shard,
                target,
                source,
                shard=shard.coords,
                key=key_of(shard.coords),
                part=shard.parts[0],
                block_boxes=(region,),
                coverage=shard.coverage,
            )
        )
    return finish_write(started.write_target, *reports)


def run_batch(
    target: ResolvedStore,
    existing: ExistingArray,
    groups: dict[Coords, list[ChunkFill]],
    boxes: Sequence[Box],
    data: Sequence[np.ndarray],
    *,
    rewrite_fits: bool,
    write_empty_chunks: bool,
    encoders: int,
) -> WriteReport:
    """Apply a checked batch: hold the array, write each shard in ``groups``, let go.

    The array's ``zarr.json`` must still be the version ``existing`` read
    (else :class:`~shardpipe.errors.JobConflictError`, nothing written:
    :func:`~shardpipe.write.update_mode.take_for_update`). On
    a failure, shards left mid-update are rolled back before the error goes
    on (as :func:`~shardpipe.write.run.execute_together` does). A shard's
    writer encodes up to ``encoders`` inner chunks at once on idle cores.
    """
    store, keys = target.shards, JobKeys(target.key(""))
    metadata = existing.metadata
    shard_format = format_of(metadata)
    marker = take_for_update(
        target, keys, existing.version, since="the batch read it; make the batch again"
    )
    try:
        codec_target = WriteTarget(
            store=store,
            layout=layout_of(metadata),
            codec=ChunkCodec.from_metadata(metadata, write_empty_chunks=write_empty_chunks),
            shard_format=shard_format,
            staging=target.key(f"{STAGING_DIR}/{uuid.uuid4().hex}"),
            encoders=encoders,
        )
        update = UpdateTarget(
            write=codec_target,
            strategy=existing.strategy,
            threshold=DEFAULT_UNUSED_THRESHOLD,
            rewrite_fits=rewrite_fits,
            keys=keys,
            marker=marker,
        )
        try:
            reports = [
                in_heap_scope(
                    update_shard_from_regions,
                    update,
                    shard=shard,
                    key=target.key(shard_format.key(shard)),
                    fills=fills,
                    boxes=boxes,
                    data=data,
                )
                for shard, fills in groups.items()
            ]
        except BaseException as err:
            undo_failed(store, keys, err, marker, None)
            raise
        return finish_write(codec_target, *reports)
    finally:
        release(store, keys, marker)
