"""Running write jobs: one streamed computation for one or several arrays.

:func:`execute_together` takes each job's marker, writes or checks its
metadata, then runs the jobs' waves one after another
(:func:`~shardpipe.engine.streaming.run_waves`: each wave's graph built while the
one before runs, small waves of several jobs together), records each wave
of a new array as done in its job record once it is (so that a resumed
write starts at the first wave not done), and on failure rolls back what
the jobs left mid-update before the error is raised.
``ShardedWrite.execute`` is ``execute_together([job])``: a job is a
:class:`~shardpipe.write.spec.WriteSpec`.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import replace

from shardpipe import advice
from shardpipe.core.checks import check_bool
from shardpipe.engine.publish_tasks import finish_write
from shardpipe.engine.reports import WriteReport
from shardpipe.engine.streaming import WaveGraph, run_waves
from shardpipe.journal.array_lock import release
from shardpipe.journal.job_record import save_record
from shardpipe.journal.markers import JobMarker
from shardpipe.journal.undo import recover
from shardpipe.write.resume import forget_finished
from shardpipe.write.spec import WriteSpec
from shardpipe.write.started import StartedJob, publish_grown, start

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
    try:
        for number, job in enumerate(jobs):
            started.append(start(job, f"{token}-{number}"))

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
                _undo_failed(s.job, err, s.marker)
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
            release(s.job.target.shards, s.job.keys, s.marker)
    seconds = time.perf_counter() - began
    results = [replace(report, seconds=seconds) for report in results]
    for report in results:
        log.info("shardpipe: %s", report)
    return results


def _undo_failed(spec: WriteSpec, err: BaseException, marker: JobMarker) -> None:
    """After a failed run: roll back shards left mid-update, remove staging data.

    Runs while the job still holds the array (``marker``): no other job
    writes it meanwhile. Say what is left and what to do, once per error
    (jobs run together share it).
    """
    if spec.target.transactional:
        what_now: str | None = (
            "shardpipe: the write did not finish; none of its shards reached the Icechunk "
            "session (the metadata it wrote did: session.discard_changes() drops it)"
        )
    elif spec.identity is not None:
        what_now = (
            "shardpipe: the write did not finish; the shards it published are complete "
            f"and kept. Run the same write with {advice.setting('resume')} to write only the rest"
        )
    else:
        what_now = None
    existing = spec.existing
    if existing is not None and existing.grown is not None:
        what_now = (
            f"shardpipe: the append did not finish: the array keeps its shape "
            f"{tuple(existing.metadata.shape)}; shards it wrote past that shape are not read "
            f"(verify lists them) until the same append is run again with "
            f"{advice.setting('resume')}, which keeps them"
        )
    if what_now is not None and what_now not in getattr(err, "__notes__", ()):
        err.add_note(what_now)
    try:
        rolled = recover(spec.target.shards, spec.keys, marker)
        if rolled:
            named = ", ".join(map(repr, rolled[:8])) + (" ..." if len(rolled) > 8 else "")
            err.add_note(
                f"shardpipe: {len(rolled)} shard(s) left mid-update were rolled back "
                f"to their old bytes: {named}"
            )
    except Exception as cleanup_err:
        err.add_note(
            f"shardpipe: undoing the failed write failed too ({cleanup_err!r}); "
            f"run `shardpipe repair` on the array"
        )
