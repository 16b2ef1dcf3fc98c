"""Running write jobs: one Dask computation for one or several arrays.

:func:`execute_together` takes each job's marker, writes or checks its
metadata, builds every graph, runs all publishing tasks at once, and on
failure rolls back what the jobs left mid-update before the error is
raised. ``ShardedWrite.execute`` is ``execute_together([job])``.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import replace

from shardpipe.checks import check_bool
from shardpipe.job import ShardedWrite, StartedJob
from shardpipe.journal import release
from shardpipe.progress import run_publishing
from shardpipe.resume import forget_finished, save_record
from shardpipe.tasks import WriteReport, finish_write

log = logging.getLogger("shardpipe")


def execute_together(jobs: Sequence[ShardedWrite], *, progress: bool = False) -> list[WriteReport]:
    """Run several write jobs as one computation; return their reports in order.

    All shards of all jobs go to the scheduler at once, so the arrays of a
    dataset share the workers. Each job holds its array's marker throughout.
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
        publishing = [task for s in started for task in s.graph.publishing]
        try:
            shards = sum(s.graph.n_shards for s in started)
            reports = run_publishing(publishing, show=progress, token=token, shards=shards)
        except BaseException as err:
            for s in started:
                s.job._undo_failed(err)
            raise
        results = []
        done = 0
        for s in started:
            count = len(s.graph.publishing)
            report = finish_write(s.write_target, *reports[done : done + count])
            done += count
            existing = s.job.existing
            if existing is not None and existing.grown is not None:
                s.job._publish_grown(existing)
            if existing is not None:
                forget_finished(s.job.target)
            if s.job.identity is not None:
                save_record(s.job.target, s.job.identity, "complete")
            results.append(replace(report, shards_skipped=len(s.job.skip)))
    finally:
        for s in reversed(started):
            release(s.job.target.shards, s.job.keys, s.marker)
    seconds = time.perf_counter() - start
    results = [replace(report, seconds=seconds) for report in results]
    for report in results:
        log.info("shardpipe: %s", report)
    return results
