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
(:mod:`shardpipe.write.in_thread`), between the same marker and records.

New arrays written on a scheduler in this process start in the background
(:class:`~shardpipe.write.started.StartInBackground`): their blocks are
computed and encoded while the marker, job record and ``zarr.json`` are
written, and nothing of theirs reaches the store before those are there.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import replace

from shardpipe.core.checks import check_bool
from shardpipe.engine.publish_tasks import finish_write
from shardpipe.engine.reports import WriteReport
from shardpipe.engine.scheduler import runs_in_process
from shardpipe.engine.streaming import WaveGraph, run_waves
from shardpipe.journal.array_lock import release
from shardpipe.journal.job_record import save_record
from shardpipe.write.failure import undo_failed
from shardpipe.write.in_thread import in_memory_source, run_in_thread
from shardpipe.write.resume import forget_finished
from shardpipe.write.spec import WriteSpec
from shardpipe.write.started import (
    StartedJob,
    StartInBackground,
    publish_grown,
    start,
    start_later,
)

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
        Show one progress bar over the shards of all jobs.
    """
    progress = check_bool("progress", progress)
    began = time.perf_counter()
    token = uuid.uuid4().hex
    started: list[StartedJob] = []
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
            if job.job.identity is not None and job.schedule.n_waves > 1:
                waves = {"shards_per_wave": job.schedule.max_shards, "done": wave.wave + 1}
                save_record(job.job.target, job.job.identity, "running", waves=waves)

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
                existing = s.job.existing
                grown_from = None
                if existing is not None and existing.grown is not None:  # an append
                    grown_from = tuple(existing.metadata.shape)
                undo_failed(
                    s.job.target,
                    s.job.keys,
                    err,
                    s.marker,
                    identity=s.job.identity,
                    grown_from=grown_from,
                )
            raise
        results = []
        for s, total in zip(started, totals, strict=True):
            report = finish_write(s.write_target, total)
            if report.changes is not None:  # a transactional backend: into the session
                s.job.target.shards.merge_changes(report.changes)
                report = replace(report, changes=None)
            existing = s.job.existing
            transactional = s.job.target.transactional
            if existing is not None and existing.grown is not None and not transactional:
                publish_grown(s.job, existing)
            if existing is not None:
                forget_finished(s.job.target)
            if s.job.identity is not None:
                save_record(s.job.target, s.job.identity, "complete")
            results.append(replace(report, shards_skipped=s.job.n_shards_skipped))
    finally:
        for s in reversed(started):
            if s.marker is not None:  # None: a start in the background that failed
                release(s.job.target.shards, s.job.keys, s.marker)
    seconds = time.perf_counter() - began
    results = [replace(report, seconds=seconds) for report in results]
    for report in results:
        log.info("shardpipe: %s", report)
    return results


def _starts_early(jobs: Sequence[WriteSpec]) -> bool:
    """Whether the jobs' markers and metadata can be written while their graphs run.

    New arrays only (an update reads the array under its marker), outside
    transactions, on a scheduler in this process: the tasks' stores wait for
    the start there (:mod:`shardpipe.storage.gated`).
    """
    return all(
        job.existing is None and not job.target.transactional and runs_in_process(job.source)
        for job in jobs
    )
