"""Starting a write job: its marker taken, its metadata written or checked, its waves to build.

:func:`start` turns a :class:`~shardpipe.write.spec.WriteSpec` into a
:class:`StartedJob`, which :mod:`shardpipe.write.run` runs.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, replace

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
from shardpipe.storage.gated import GatedStore
from shardpipe.storage.resolve import ResolvedStore
from shardpipe.stored.metadata import metadata_bytes
from shardpipe.write.creation import create_array
from shardpipe.write.resume import check_same_job, forget_finished
from shardpipe.write.spec import WriteSpec
from shardpipe.write.update_target import ExistingArray


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
        return take(start_later(spec, token, uploads=uploads))
    marker = take_for_update(
        spec.target,
        keys,
        existing.version,
        since="this update was planned; plan it again",
        keep=existing.update,
    )
    try:
        write_target = spec.write_target(token, uploads=uploads)
        target = _update_target(spec, existing, write_target, marker)
        if spec.target.transactional and existing.grown is not None:
            # inside a transaction nobody sees it early, and Icechunk takes
            # chunks only inside the array's shape
            publish_grown(spec, existing)
    except BaseException:
        release(store, keys, marker)
        raise
    threads = cluster_threads()
    return StartedJob(
        spec, marker, write_target, target, token, threads, spec.wave_schedule(threads)
    )


def start_later(
    spec: WriteSpec, token: str, *, uploads: str = "", gate: Future[None] | None = None
) -> StartedJob:
    """A new array's job with what its graphs need, its marker not taken yet: no I/O.

    :func:`take` then takes the marker and writes or checks the metadata.
    With ``gate``, its tasks' store waits for it (:mod:`shardpipe.storage.gated`):
    the graphs may run while :func:`take` does, on another thread.
    """
    assert spec.existing is None, "an update reads the array under its marker: start() it"
    write_target = spec.write_target(token, uploads=uploads)
    if gate is not None:
        write_target = replace(write_target, store=GatedStore(write_target.store, gate))
    threads = cluster_threads()
    schedule = spec.wave_schedule(threads)
    return StartedJob(spec, None, write_target, write_target, token, threads, schedule)


def take(started: StartedJob) -> StartedJob:
    """Take the marker of a job from :func:`start_later` and write or check its metadata."""
    spec = started.job
    store, keys = spec.target.shards, spec.keys
    marker = acquire(store, keys, "write")
    try:
        if spec.create_kwargs is None:  # the marker, just taken, is not read again
            if spec.resume and spec.identity is not None:
                check_same_job(spec.target, spec.identity, spec.resume)
        else:
            create_array(
                spec.target,
                spec.create_kwargs,
                spec.overwrite,
                started.write_target,
                marker,
                metadata=spec.metadata,
                identity=spec.identity,
            )
    except BaseException:
        release(store, keys, marker)
        raise
    return replace(started, marker=marker)


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
