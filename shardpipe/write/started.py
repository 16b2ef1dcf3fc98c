"""A write job that has started: its marker taken, its metadata written, its waves to build.

Made by ``ShardedWrite._start`` and run by :mod:`shardpipe.write.run`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from shardpipe.core.waves import WaveSchedule
from shardpipe.engine.graph import build_write_graph
from shardpipe.engine.progress import runs_in_process
from shardpipe.engine.streaming import WaveGraph
from shardpipe.engine.tasks import WriteTarget
from shardpipe.engine.update_tasks import UpdateTarget
from shardpipe.journal.markers import JobMarker

if TYPE_CHECKING:
    from shardpipe.write.job import ShardedWrite


@dataclass(frozen=True)
class StartedJob:
    """A job whose marker is taken and whose metadata is written (see :mod:`shardpipe.write.run`).

    Parameters
    ----------
    job : ShardedWrite
        The job.
    marker : JobMarker
        The array's marker it holds.
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

    job: ShardedWrite
    marker: JobMarker
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
                job._key_of(),
                self.token if whole else f"{self.token}-w{number}",
                in_process=in_process,
                update=job.existing is not None,
                skip=job.skip,
                threads=self.threads,
                wave=None if whole else wave,
                shared_source=job.shared_source,
            )
            yield WaveGraph(index, number, graph.publishing, math.ceil(wave.n_shards * per_shard))
