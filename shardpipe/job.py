"""The write job: a validated, planned write that can be held, inspected and run.

:func:`~shardpipe.prepare.prepare_write` checks every argument, resolves the
store, builds the array's metadata in memory and plans the write (a new array,
a region of an existing one, or an append), writing nothing. The
:class:`ShardedWrite` it returns shows the plan (``print(job)``, or a table
in a notebook), runs it (:meth:`ShardedWrite.execute`), or hands it over as a
Dask ``Delayed`` (:meth:`ShardedWrite.to_delayed`). ``to_sharded_zarr`` is
``prepare_write(...).execute()``.

While it runs, a job holds the array's marker (:mod:`shardpipe.journal`): a
new array is created after it is taken, an update checks that ``zarr.json``
did not change since planning, and an append publishes the grown metadata
after every shard.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import dask.array as da
import zarr
from dask.delayed import Delayed, delayed
from zarr.core.metadata.v3 import ArrayV3Metadata

from shardpipe.core.grid import Coords, ShardLayout
from shardpipe.core.plan import WritePlan
from shardpipe.core.shard_update import DEFAULT_UNUSED_THRESHOLD
from shardpipe.core.sizes import format_bytes
from shardpipe.creation import (
    check_metadata_written,
    check_no_other_job,
    create_array,
    record_complete,
)
from shardpipe.encoding import ChunkCodec
from shardpipe.errors import (
    ConditionFailedError,
    InvalidArgumentError,
    JobConflictError,
)
from shardpipe.existing import (
    ExistingArray,
    metadata_bytes,
)
from shardpipe.formats.zarr_sharding import ZarrShardingFormat
from shardpipe.graph import WriteGraph, build_write_graph
from shardpipe.journal import (
    JobKeys,
    JobMarker,
    acquire,
    recover,
    release,
)
from shardpipe.metadata import format_of
from shardpipe.progress import cluster_threads, runs_in_process
from shardpipe.resume import (
    Resume,
    check_same_job,
    delete_record,
    forget_finished,
)
from shardpipe.storage.resolve import ResolvedStore
from shardpipe.summary import html_table, text_table
from shardpipe.tasks import WriteReport, WriteTarget
from shardpipe.updating import UpdateTarget

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
        carry it on (:mod:`shardpipe.resume`); None for updates.
    resume : bool or "force"
        For a resumed write: how its job record is compared (again when it
        starts running: another job may have replaced the array meanwhile).

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

    def summary_rows(self) -> list[tuple[str, str]]:
        """The plan's summary as ``(label, value)`` rows (what ``repr`` and the HTML show)."""
        plan, meta = self.plan, self.metadata
        location = self.target.path or "/"
        codecs = [str(c.to_dict()["name"]) for c in self._chunk_codec().codecs]
        peaks = {**plan.projected_peaks()}
        for kind, peak in plan.projected_peaks(in_process=True).items():
            if kind not in peaks or peak.nbytes > peaks[kind].nbytes:
                peaks[kind] = peak
        # an update's one task per shard is update-shard (planned like write-shard)
        name = {"write-shard": "update-shard"} if self.existing else {}
        memory = ", ".join(
            f"{name.get(k, k)} {format_bytes(m.nbytes)}" for k, m in sorted(peaks.items())
        )
        tasks = ", ".join(f"{name.get(k, k)} {n:,}" for k, n in sorted(plan.task_counts.items()))
        return [
            ("target", f"{self.target.zarr_store} at {location!r}"),
            (
                "array",
                f"shape {meta.shape}, dtype {self.source.dtype}, fill value {meta.fill_value}",
            ),
            (
                "layout",
                f"shards {plan.layout.shard_shape}, inner chunks {plan.layout.chunk_shape}, "
                f"index at the {self.shard_format.index_location}",
            ),
            ("inner codecs", " -> ".join(codecs) or "none"),
            (
                "source",
                f"{plan.blocks.shape} in {self.source.npartitions:,} Dask blocks "
                f"(largest {format_bytes(plan.block_nbytes)})",
            ),
            (
                "shards",
                f"{plan.n_shards:,} ({plan.n_multipart_shards:,} in parts; "
                + (f"{len(self.skip):,} complete already, skipped; " if self.skip else "")
                + f"{plan.n_parts:,} parts of up to {plan.part_chunks} inner chunks)",
            ),
            *self._update_rows(),
            ("tasks", f"{plan.num_tasks:,}: {tasks}"),
            ("bytes in", f"{format_bytes(plan.nbytes_in)} raw"),
            ("bytes out", f"at most {format_bytes(plan.nbytes_out_max)} encoded"),
            ("peak memory per task", f"{memory} (max_mem {format_bytes(plan.max_mem)})"),
        ]

    def _update_rows(self) -> list[tuple[str, str]]:
        existing = self.existing
        if existing is None:
            return []
        plan = self.plan
        what = "append" if existing.grown is not None else "region write"
        old_shape = tuple(existing.metadata.shape)
        return [
            (
                "update",
                f"{what} at {plan.placement.region} of {old_shape}"
                + (f" (grown to {tuple(self.metadata.shape)})" if existing.grown else "")
                + f", write_strategy {existing.strategy!r}",
            ),
            (
                "inner chunks",
                f"{plan.n_chunks_full:,} replaced, {plan.n_chunks_partial:,} merged with "
                "their old content",
            ),
        ]

    def __repr__(self) -> str:
        return text_table("ShardedWrite", self.summary_rows())

    def _repr_html_(self) -> str:
        return html_table("ShardedWrite", self.summary_rows())

    # -- running it ----------------------------------------------------------
    def _chunk_codec(self) -> ChunkCodec:
        return ChunkCodec.from_metadata(self.metadata, write_empty_chunks=self._write_empty_chunks)

    def _write_target(self, token: str) -> WriteTarget:
        return WriteTarget(
            store=self.target.shards,
            layout=self.layout,
            codec=self._chunk_codec(),
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
        :class:`~shardpipe.tasks.WriteReport`. Piece tasks encode where the
        blocks live, so the graph suits every scheduler. After a failed
        computation, :func:`shardpipe.cleanup` removes what it left.
        """
        if self.existing is not None:
            raise InvalidArgumentError(
                "compute",
                "a region write or an append runs at once (it holds the array's job marker "
                "while it changes shards)",
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
        graph = build_write_graph(
            self.source, self.plan, target_d, self._key_of(), token, skip=self.skip
        )
        if self.identity is None:
            return graph.result
        done: Delayed = delayed(record_complete, pure=False)(
            graph.result,
            self.target,
            self.identity,
            len(self.skip),
            dask_key_name=f"record-complete-{token}",
        )
        return done

    def execute(self, *, progress: bool = False) -> WriteReport:
        """Write the metadata, then every shard; return what was written.

        Parameters
        ----------
        progress : bool
            Show a progress bar over shards and bytes (console or notebook),
            on any scheduler.

        Returns
        -------
        WriteReport
            Shards written and left out as empty, bytes, inner chunks, seconds.

        Raises
        ------
        shardpipe.errors.ArrayExistsError
            If a node appeared at the target since planning and ``overwrite``
            is False.
        Exception
            Whatever a task raised; shards already published stay, staging and
            unfinished uploads are removed first (a failure of that cleanup is
            added to the error's notes, never in its place).
        """
        from shardpipe.execute import execute_together

        return execute_together([self], progress=progress)[0]

    def _start(self, token: str) -> StartedJob:
        """Take the array's marker, write or check the metadata, build the graph."""
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
            graph = build_write_graph(
                self.source,
                self.plan,
                target,
                self._key_of(),
                token,
                in_process=runs_in_process(self.source),
                update=self.existing is not None,
                skip=self.skip,
                threads=cluster_threads(),
            )
        except BaseException:
            release(store, keys, marker)
            raise
        return StartedJob(self, marker, write_target, graph)

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
        )

    def _undo_failed(self, err: BaseException) -> None:
        """After a failed run: roll back shards left mid-update, remove staging data."""
        if self.identity is not None:
            err.add_note(
                "shardpipe: the write did not finish; the shards it published are complete "
                "and kept. Run the same write with resume=True to write only the rest"
            )
        try:
            rolled = recover(self.target.shards, self.keys, None)
            if rolled:
                err.add_note(f"shardpipe: {rolled} shard(s) left mid-update were rolled back")
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

    def resumed(self, skip: frozenset[Coords], resume: Resume = True) -> ShardedWrite:
        """This write, into the array it already created, leaving the shards in ``skip`` alone.

        ``resume`` is how the job record is compared when the write starts.
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
        )

    def open(self) -> zarr.Array[Any]:
        """Open the written array for reading and writing."""
        return zarr.open_array(self.target.zarr_store, path=self.target.path, mode="r+")


@dataclass(frozen=True)
class StartedJob:
    """A job whose marker is taken and whose graph is built (see :mod:`shardpipe.execute`)."""

    job: ShardedWrite
    marker: JobMarker
    write_target: WriteTarget
    graph: WriteGraph
