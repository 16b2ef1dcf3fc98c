"""The write job: a validated, planned write that can be held, inspected and run.

:func:`~shardpipe.write.prepare.prepare_write` checks every argument, resolves the
store, builds the array's metadata in memory and plans the write (a new array,
a region of an existing one, or an append), writing nothing. The
:class:`ShardedWrite` it returns shows the plan (``print(job)``, or a table
in a notebook), runs it (:meth:`ShardedWrite.execute`), or hands it over as a
Dask ``Delayed`` (:meth:`ShardedWrite.to_delayed`). ``to_sharded_zarr`` is
``prepare_write(...).execute()``.

While it runs, a job holds the array's marker (:mod:`shardpipe.journal.undo`): a
new array is created after it is taken, an update checks that ``zarr.json``
did not change since planning, and an append publishes the grown metadata
after every shard.

A job runs in waves of shards (:mod:`shardpipe.core.waves`,
:mod:`shardpipe.engine.streaming`): each wave's graph is built from the source when
the wave is about to run, so neither the client nor the scheduler ever holds
the graph of a whole petabyte array. A small write is one wave.
"""

from __future__ import annotations

import itertools
import logging
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import dask.array as da
import zarr
from dask.delayed import Delayed, delayed
from zarr.core.metadata.v3 import ArrayV3Metadata

from shardpipe.codec.chunk_codec import ChunkCodec
from shardpipe.core.display import html_table, text_table
from shardpipe.core.grid import Coords, ShardLayout
from shardpipe.core.plan import WritePlan
from shardpipe.core.shard_update import DEFAULT_UNUSED_THRESHOLD
from shardpipe.core.waves import WaveSchedule, wave_shards
from shardpipe.engine.graph import build_write_graph
from shardpipe.engine.progress import cluster_threads
from shardpipe.engine.reports import WriteReport
from shardpipe.engine.streaming import WAVES_PER_BATCH, wave_tasks
from shardpipe.engine.tasks import WriteTarget
from shardpipe.engine.update_tasks import UpdateTarget
from shardpipe.errors import (
    ConditionFailedError,
    InvalidArgumentError,
    JobConflictError,
)
from shardpipe.formats.zarr_sharding import ZarrShardingFormat
from shardpipe.journal.array_lock import acquire, release
from shardpipe.journal.markers import JobKeys, JobMarker
from shardpipe.journal.undo import recover
from shardpipe.storage.resolve import ResolvedStore
from shardpipe.stored.metadata import format_of
from shardpipe.write.creation import (
    check_metadata_written,
    check_no_other_job,
    create_array,
    record_complete,
)
from shardpipe.write.resume import (
    Resume,
    check_same_job,
    delete_record,
    forget_finished,
)
from shardpipe.write.started import StartedJob
from shardpipe.write.summary import summary_rows
from shardpipe.write.update_target import (
    ExistingArray,
    metadata_bytes,
)

DEFAULT_MAX_MEM = "1GiB"
"""Default memory budget per task (see ``to_sharded_zarr``'s ``max_mem``)."""

STAGING_DIR = ".shardpipe/staging"
"""Folder (key prefix) beside the array's metadata for scratch data of writes."""

log = logging.getLogger("shardpipe")


class ShardedWrite:
    """A write of a Dask array into a sharded Zarr v3 array, validated and planned.

    Made by :func:`prepare_write`; nothing is written until :meth:`execute`
    runs or the :meth:`to_delayed` result is computed.

    Attributes
    ----------
    source : dask.array.Array
        The data to write.
    target : ResolvedStore
        Where it goes.
    metadata : ArrayV3Metadata
        The array's metadata, as it will be written (for an append: grown).
    plan : WritePlan
        Which tasks write which shards, in how many parts, at what memory.
    overwrite : bool
        Whether an existing node at the target is replaced.
    existing : ExistingArray or None
        For a region write or an append: the array written into, where the
        source goes and the write strategy; None for a new array.
    skip : frozenset of shard coordinates
        Shards left alone because they are complete (a resumed write).
    identity : dict or None
        For a new array: what the write's job record holds (its source and
        target metadata), saved beside the array so that ``resume=True`` can
        carry it on (:mod:`shardpipe.write.resume`); None for updates.
    resume : bool or "force"
        For a resumed write: how its job record is compared (again when it
        starts running: another job may have replaced the array meanwhile).
    first_wave : int
        For a resumed write: the first wave not recorded as done; the shards
        of the waves before it are complete and not looked at again.
    wave_size : int or None
        Shards per wave; None chooses them when the job runs
        (:meth:`wave_schedule`). A resumed write keeps its first run's.
    shared_source : bool
        The source's blocks feed other jobs run together with this one (the
        levels of a pyramid): the job runs as one wave, in one computation
        with those jobs, and its graph keeps the blocks as tasks of their own
        (see :func:`~shardpipe.engine.graph.build_write_graph`).

    Notes
    -----
    ``create_kwargs`` are the arguments of ``zarr.create_array`` for a new
    array; None means that the caller already wrote the metadata of a new,
    empty array (xarray does, for the accessor), which is then only filled.
    """

    def __init__(
        self,
        source: da.Array,
        target: ResolvedStore,
        create_kwargs: dict[str, Any] | None,
        metadata: ArrayV3Metadata,
        plan: WritePlan,
        *,
        overwrite: bool,
        write_empty_chunks: bool,
        existing: ExistingArray | None = None,
        rewrite_fits: bool = True,
        skip: frozenset[Coords] = frozenset(),
        identity: dict[str, Any] | None = None,
        resume: Resume = False,
        first_wave: int = 0,
        wave_size: int | None = None,
        shared_source: bool = False,
    ) -> None:
        self.source = source
        self.target = target
        self.metadata = metadata
        self.plan = plan
        self.overwrite = overwrite
        self.existing = existing
        self._create_kwargs = create_kwargs
        self._write_empty_chunks = write_empty_chunks
        self._rewrite_fits = rewrite_fits
        self.skip = skip
        self.identity = identity
        self.resume = resume
        self.first_wave = first_wave
        self.wave_size = wave_size
        self.shared_source = shared_source

    @property
    def keys(self) -> JobKeys:
        """Keys of the array's job marker, undo records and staging area."""
        return JobKeys(self.target.key(""))

    # -- what it is ------------------------------------------------------------
    @property
    def shard_format(self) -> ZarrShardingFormat:
        """The shard format of the target array."""
        return format_of(self.metadata)

    @property
    def layout(self) -> ShardLayout:
        """Shard and inner-chunk grids of the target array."""
        return self.plan.layout

    def wave_schedule(self, threads: int | None = None) -> WaveSchedule:
        """The waves the job runs in.

        A wave holds as many shards as an eighth of ``shardpipe.wave-tasks``
        tasks allow (:func:`~shardpipe.engine.streaming.wave_tasks`, counting the
        tasks of any scheduler; waves run in batches of about eight), and at
        least two per worker thread (``threads``, or this machine's cores),
        so that every thread has work.
        """
        plan = self.plan
        size = max(plan.n_shards, 1) if self.shared_source else self.wave_size
        if size is None:
            from dask.system import CPU_COUNT

            per_shard = plan.num_tasks / max(plan.n_shards, 1)
            tasks = wave_tasks() // WAVES_PER_BATCH
            size = wave_shards(per_shard, tasks, 2 * (threads or CPU_COUNT), plan.n_shards)
        return WaveSchedule(plan.placement.shard_ranges, size)

    @property
    def n_shards_skipped(self) -> int:
        """Shards a resumed write leaves alone: those of its done waves and the complete others."""
        schedule = self.wave_schedule()
        done = sum(schedule.wave(k).n_shards for k in range(min(self.first_wave, schedule.n_waves)))
        return done + len(self.skip)

    def summary_rows(self) -> list[tuple[str, str]]:
        """The plan's summary as ``(label, value)`` rows (what ``repr`` and the HTML show)."""
        return summary_rows(self)

    def __repr__(self) -> str:
        return text_table("ShardedWrite", self.summary_rows())

    def _repr_html_(self) -> str:
        return html_table("ShardedWrite", self.summary_rows())

    # -- running it ----------------------------------------------------------
    def chunk_codec(self) -> ChunkCodec:
        """The codec chain inner chunks are encoded with, and their fill value."""
        return ChunkCodec.from_metadata(self.metadata, write_empty_chunks=self._write_empty_chunks)

    def _write_target(self, token: str) -> WriteTarget:
        return WriteTarget(
            store=self.target.shards,
            layout=self.layout,
            codec=self.chunk_codec(),
            shard_format=self.shard_format,
            staging=self.target.key(f"{STAGING_DIR}/{token}"),
        )

    def _key_of(self) -> Callable[[Coords], str]:
        shard_format, target = self.shard_format, self.target

        def key_of(coords: Coords) -> str:
            return target.key(shard_format.key(coords))

        return key_of

    def to_delayed(self) -> Delayed:
        """Return the write as a ``dask.delayed.Delayed``; nothing is written until it is computed.

        Its first task writes the metadata (after checking the target once
        more); every task touching storage waits for it. It computes to a
        :class:`~shardpipe.engine.reports.WriteReport`. Piece tasks encode where the
        blocks live, so the graph suits every scheduler. After a failed
        computation, :func:`shardpipe.cleanup` removes what it left.

        The graph holds every shard of the write at once; :meth:`execute`
        runs large writes wave by wave instead (see :attr:`wave_schedule`).
        """
        if self.existing is not None:
            raise InvalidArgumentError(
                "compute",
                "a region write or an append runs at once (it holds the array's job marker "
                "while it changes shards)",
                "Use compute=True (or ShardedWrite.execute())",
            )
        if self.target.transactional:
            raise InvalidArgumentError(
                "compute",
                "False, but a write into an Icechunk session runs at once: the changes its "
                "tasks make come back and are merged into the session in this process",
                "Use compute=True (or ShardedWrite.execute())",
            )
        token = uuid.uuid4().hex
        if self._create_kwargs is None:
            target_d = delayed(check_metadata_written, pure=False)(
                self.target,
                self._write_target(token),
                self.identity,
                self.resume,
                dask_key_name=f"check-array-{token}",
            )
        else:
            target_d = delayed(create_array, pure=False)(
                self.target,
                self._create_kwargs,
                self.overwrite,
                self._write_target(token),
                identity=self.identity,
                run=token,
                dask_key_name=f"create-array-{token}",
            )
        skip = self.skip
        if self.first_wave:  # one graph: leave the done waves out shard by shard
            schedule = self.wave_schedule()
            waves = (schedule.wave(k) for k in range(min(self.first_wave, schedule.n_waves)))
            skip = skip | {c for wave in waves for c in itertools.product(*wave.ranges)}
        graph = build_write_graph(
            self.source, self.plan, target_d, self._key_of(), token, skip=skip
        )
        if self.identity is None:
            return graph.result
        done: Delayed = delayed(record_complete, pure=False)(
            graph.result,
            self.target,
            self.identity,
            self.n_shards_skipped,
            dask_key_name=f"record-complete-{token}",
        )
        return done

    def execute(
        self, *, progress: bool = False, commit: str | None = None, rebase: bool = False
    ) -> WriteReport:
        """Write the metadata, then every shard; return what was written.

        Parameters
        ----------
        progress : bool
            Show a progress bar over shards and bytes (console or notebook),
            on any scheduler.
        commit : str, optional
            Into an Icechunk session: commit it with this message at the end
            (the report's ``snapshot_id`` is the new snapshot). Without it the
            session holds the changes for you to commit.
        rebase : bool
            With ``commit``: rebase onto commits that reached the branch
            meanwhile when none changed a shard this write changed.

        Returns
        -------
        WriteReport
            Shards written and left out as empty, bytes, inner chunks, seconds.

        Raises
        ------
        shardpipe.errors.ArrayExistsError
            If a node appeared at the target since planning and ``overwrite``
            is False.
        shardpipe.errors.TransactionConflictError
            If the commit lost a race with another (see :mod:`shardpipe.write.transaction`).
        Exception
            Whatever a task raised; shards already published stay, staging and
            unfinished uploads are removed first (a failure of that cleanup is
            added to the error's notes, never in its place). Into an Icechunk
            session, nothing of a failed write's shards reaches the session.
        """
        from shardpipe.write.run import execute_together
        from shardpipe.write.transaction import check_commit, commit_write

        message, rebase = check_commit(commit, rebase, self.target)
        report = execute_together([self], progress=progress)[0]
        if message is None:
            return report
        return replace(report, snapshot_id=commit_write(self.target, message, rebase=rebase))

    def _start(self, token: str) -> StartedJob:
        """Take the array's marker and write or check the metadata; the graphs come later."""
        store, keys = self.target.shards, self.keys
        marker = acquire(store, keys, "write" if self.existing is None else "update")
        try:
            write_target = self._write_target(token)
            target: WriteTarget | UpdateTarget = write_target
            if self.existing is not None:
                target = self._update_target(write_target, marker)
                # the shards are about to change: the record of the write that made
                # them vouches for them no longer, nor do other updates' records
                delete_record(self.target)
                forget_finished(self.target, keep=self.existing.update)
                if self.target.transactional and self.existing.grown is not None:
                    # inside a transaction nobody sees it early, and Icechunk takes
                    # chunks only inside the array's shape
                    self._publish_grown(self.existing)
            elif self._create_kwargs is None:
                check_no_other_job(self.target, marker, "write the array")
                if self.resume and self.identity is not None:
                    check_same_job(self.target, self.identity, self.resume)
            else:
                create_array(
                    self.target,
                    self._create_kwargs,
                    self.overwrite,
                    write_target,
                    marker,
                    identity=self.identity,
                )
        except BaseException:
            release(store, keys, marker)
            raise
        threads = cluster_threads()
        return StartedJob(
            self, marker, write_target, target, token, threads, self.wave_schedule(threads)
        )

    def _update_target(self, write_target: WriteTarget, marker: JobMarker) -> UpdateTarget:
        existing = self.existing
        assert existing is not None
        if self.target.shards.version(self.target.key("zarr.json")) != existing.version:
            raise JobConflictError(
                "the array's zarr.json changed since this update was planned; plan it again"
            )
        return UpdateTarget(
            write=write_target,
            strategy=existing.strategy,
            threshold=DEFAULT_UNUSED_THRESHOLD,
            rewrite_fits=self._rewrite_fits,
            keys=self.keys,
            marker=marker,
            update=existing.update,
            in_place_fits=existing.in_place_fits,
        )

    def _undo_failed(self, err: BaseException, marker: JobMarker) -> None:
        """After a failed run: roll back shards left mid-update, remove staging data.

        Runs while the job still holds the array (``marker``): no other job
        writes it meanwhile. Say what is left and what to do, once per error
        (jobs run together share it).
        """
        if self.target.transactional:
            what_now: str | None = (
                "shardpipe: the write did not finish; none of its shards reached the Icechunk "
                "session (the metadata it wrote did: session.discard_changes() drops it)"
            )
        elif self.identity is not None:
            what_now = (
                "shardpipe: the write did not finish; the shards it published are complete "
                "and kept. Run the same write with resume=True to write only the rest"
            )
        else:
            what_now = None
        if what_now is not None and what_now not in getattr(err, "__notes__", ()):
            err.add_note(what_now)
        try:
            rolled = recover(self.target.shards, self.keys, marker)
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

    def _publish_grown(self, existing: ExistingArray) -> None:
        """Publish the grown ``zarr.json`` of an append, if nobody changed it meanwhile."""
        assert existing.grown is not None
        try:
            self.target.shards.put(
                self.target.key("zarr.json"),
                [metadata_bytes(existing.grown)],
                if_version=existing.version,
            )
        except ConditionFailedError as err:
            raise JobConflictError(
                "the array's zarr.json changed during the append; its shards hold the new "
                "data but the array was not grown. Check what else writes this array"
            ) from err

    def resumed(
        self,
        skip: frozenset[Coords],
        resume: Resume = True,
        *,
        first_wave: int = 0,
        wave_size: int | None = None,
    ) -> ShardedWrite:
        """This write, into the array it already created, leaving the shards in ``skip`` alone.

        ``resume`` is how the job record is compared when the write starts;
        ``first_wave`` and ``wave_size`` carry on the first run's waves.
        """
        return ShardedWrite(
            self.source,
            self.target,
            None,
            self.metadata,
            self.plan,
            overwrite=False,
            write_empty_chunks=self._write_empty_chunks,
            skip=skip,
            identity=self.identity,
            resume=resume,
            first_wave=first_wave,
            wave_size=wave_size,
            shared_source=self.shared_source,
        )

    def open(self) -> zarr.Array[Any]:
        """Open the written array for reading and writing."""
        return zarr.open_array(self.target.zarr_store, path=self.target.path, mode="r+")
