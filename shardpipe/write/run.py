"""Running write jobs: one streamed computation for one or several arrays.

:func:`execute_together` takes each job's marker, writes or checks its
metadata, then runs the jobs' waves one after another
(:func:`~shardpipe.engine.streaming.run_waves`: each wave's graph built while the
one before runs, small waves of several jobs together), records each wave
of a new array as done in its job record once it is (so that a resumed
write starts at the first wave not done), and on failure rolls back what
the jobs left mid-update before the error is raised.
``ShardedWrite.execute`` is ``execute_together([job])``.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import replace

from shardpipe.core.checks import check_bool
from shardpipe.engine.reports import WriteReport
from shardpipe.engine.streaming import WaveGraph, run_waves
from shardpipe.engine.tasks import finish_write
from shardpipe.journal.array_lock import release
from shardpipe.write.job import ShardedWrite
from shardpipe.write.resume import forget_finished, save_record
from shardpipe.write.started import StartedJob

log = logging.getLogger("shardpipe")


def execute_together(jobs: Sequence[ShardedWrite], *, progress: bool = False) -> list[WriteReport]:
    """Run several write jobs as one computation; return their reports in order.

    All shards of all jobs go to the scheduler at once, so the arrays of a
    dataset share the workers. Jobs whose sources share blocks (``shared_source``:
    the levels of a pyramid) run in one batch, so that each block is computed
    once. Each job holds its array's marker throughout.
    If any task fails, every job rolls back the shards it left mid-update and
    removes its staging data before the error is raised.

    Parameters
    ----------
    jobs : sequence of ShardedWrite
        Jobs on distinct arrays.
    progress : bool
        Show one progress bar over the shards of all jobs.
    """
    progress = check_bool("progress", progress)
    start = time.perf_counter()
    token = uuid.uuid4().hex
    started: list[StartedJob] = []
    try:
        for number, job in enumerate(jobs):
            started.append(job._start(f"{token}-{number}"))

        def record_wave(wave: WaveGraph) -> None:
            job = started[wave.job]
            if job.job.identity is not None and job.schedule.n_waves > 1:
                waves = {"shards_per_wave": job.schedule.max_shards, "done": wave.wave + 1}
                save_record(job.job.target, job.job.identity, "running", waves=waves)

        try:
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
        except BaseException as err:
            for s in started:
                s.job._undo_failed(err, s.marker)
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
                s.job._publish_grown(existing)
            if existing is not None:
                forget_finished(s.job.target)
            if s.job.identity is not None:
                save_record(s.job.target, s.job.identity, "complete")
            results.append(replace(report, shards_skipped=s.job.n_shards_skipped))
    finally:
        for s in reversed(started):
            release(s.job.target.shards, s.job.keys, s.marker)
    seconds = time.perf_counter() - start
    results = [replace(report, seconds=seconds) for report in results]
    for report in results:
        log.info("shardpipe: %s", report)
    return results
