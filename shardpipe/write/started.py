"""Starting a write job: its marker taken, its metadata written or checked, its waves to build.

:func:`start` turns a :class:`~shardpipe.write.spec.WriteSpec` into a
:class:`StartedJob`, which :mod:`shardpipe.write.run` runs.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

from shardpipe.core.shard_update import DEFAULT_UNUSED_THRESHOLD
from shardpipe.core.waves import WaveSchedule
from shardpipe.engine.graph import build_write_graph
from shardpipe.engine.scheduler import cluster_threads, runs_in_process
from shardpipe.engine.streaming import WaveGraph
from shardpipe.engine.tasks import WriteTarget
from shardpipe.engine.update_tasks import UpdateTarget
from shardpipe.errors import ConditionFailedError, JobConflictError
from shardpipe.journal.array_lock import acquire, release
from shardpipe.journal.job_record import delete_record
from shardpipe.journal.markers import JobKeys, JobMarker
from shardpipe.storage.base import ObjectVersion
from shardpipe.storage.resolve import ResolvedStore
from shardpipe.write.creation import create_array
from shardpipe.write.resume import check_same_job, forget_finished
from shardpipe.write.spec import WriteSpec
from shardpipe.write.update_target import ExistingArray, metadata_bytes


@dataclass(frozen=True)
class StartedJob:
    """A job whose marker is taken and whose metadata is written (see :mod:`shardpipe.write.run`).

    Parameters
    ----------
    job : WriteSpec
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

    job: WriteSpec
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
                job.key_of(),
                self.token if whole else f"{self.token}-w{number}",
                in_process=in_process,
                update=job.existing is not None,
                skip=job.skip,
                threads=self.threads,
                wave=None if whole else wave,
                shared_source=job.shared_source,
            )
            n_tasks = math.ceil(wave.n_shards * per_shard)
            yield WaveGraph(index, number, graph.publishing, n_tasks, graph.blocks)


def start(spec: WriteSpec, token: str, *, uploads: str = "") -> StartedJob:
    """Take the array's marker and write or check the metadata; the graphs come later.

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
    store, keys, existing = spec.target.shards, spec.keys, spec.existing
    if existing is None:
        marker = acquire(store, keys, "write")
    else:
        marker = take_for_update(
            spec.target,
            keys,
            existing.version,
            since="this update was planned; plan it again",
            keep=existing.update,
        )
    try:
        write_target = spec.write_target(token, uploads=uploads)
        target: WriteTarget | UpdateTarget = write_target
        if existing is not None:
            target = _update_target(spec, existing, write_target, marker)
            if spec.target.transactional and existing.grown is not None:
                # inside a transaction nobody sees it early, and Icechunk takes
                # chunks only inside the array's shape
                publish_grown(spec, existing)
        elif spec.create_kwargs is None:  # the marker, just taken, is not read again
            if spec.resume and spec.identity is not None:
                check_same_job(spec.target, spec.identity, spec.resume)
        else:
            create_array(
                spec.target,
                spec.create_kwargs,
                spec.overwrite,
                write_target,
                marker,
                metadata=spec.metadata,
                identity=spec.identity,
            )
    except BaseException:
        release(store, keys, marker)
        raise
    threads = cluster_threads()
    return StartedJob(
        spec, marker, write_target, target, token, threads, spec.wave_schedule(threads)
    )


def take_for_update(
    target: ResolvedStore,
    keys: JobKeys,
    version: ObjectVersion | None,
    *,
    since: str,
    keep: str | None = None,
) -> JobMarker:
    """Take the marker of the array at ``target`` for an update of it as read at ``version``.

    Its ``zarr.json`` must still be that version, else
    :class:`~shardpipe.errors.JobConflictError` is raised with the marker let
    go: nothing is written (``since`` ends its message: when the version was
    read, and the fix). Then, the shards being about to change, the record
    of the write that made them vouches for them no longer, nor do other
    updates' records of finished shards (all but update ``keep``'s): they
    are deleted. A planned update (:func:`start`) and a batch of region
    writes (:func:`~shardpipe.write.in_thread.run_batch`) both begin here.
    """
    store = target.shards
    marker = acquire(store, keys, "update")
    try:
        if store.version(target.key("zarr.json")) != version:
            raise JobConflictError(f"the array's zarr.json changed since {since}")
        delete_record(target)
        forget_finished(target, keep=keep)
    except BaseException:
        release(store, keys, marker)
        raise
    return marker


def _update_target(
    spec: WriteSpec, existing: ExistingArray, write_target: WriteTarget, marker: JobMarker
) -> UpdateTarget:
    return UpdateTarget(
        write=write_target,
        strategy=existing.strategy,
        threshold=DEFAULT_UNUSED_THRESHOLD,
        rewrite_fits=spec.rewrite_fits,
        keys=spec.keys,
        marker=marker,
        update=existing.update,
        in_place_fits=existing.in_place_fits,
    )


def publish_grown(spec: WriteSpec, existing: ExistingArray) -> None:
    """Publish the grown ``zarr.json`` of an append, if nobody changed it meanwhile."""
    assert existing.grown is not None
    try:
        spec.target.shards.put(
            spec.target.key("zarr.json"),
            [metadata_bytes(existing.grown)],
            if_version=existing.version,
        )
    except ConditionFailedError as err:
        raise JobConflictError(
            "the array's zarr.json changed during the append; its shards hold the new "
            "data but the array was not grown. Check what else writes this array"
        ) from err
