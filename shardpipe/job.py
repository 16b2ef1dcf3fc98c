"""The write job: a validated, planned write that can be held, inspected and run.

:func:`prepare_write` checks every argument, resolves the store, builds the
array's metadata in memory and plans the write, writing nothing. The
:class:`ShardedWrite` it returns shows the plan (``print(job)``, or a table
in a notebook), runs it (:meth:`ShardedWrite.execute`), or hands it over as a
Dask ``Delayed`` (:meth:`ShardedWrite.to_delayed`). ``to_sharded_zarr`` is
``prepare_write(...).execute()``.
"""

from __future__ import annotations

import html
import logging
import math
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import dask.array as da
import zarr
from dask.delayed import Delayed, delayed
from zarr.core.metadata.v3 import ArrayV3Metadata

from shardpipe.core.grid import BlockGrid, Coords, ShardLayout
from shardpipe.core.memory import MemoryModel
from shardpipe.core.plan import WritePlan, plan_write
from shardpipe.core.region import Placement
from shardpipe.core.shard_update import DEFAULT_UNUSED_THRESHOLD
from shardpipe.core.sizes import format_bytes
from shardpipe.encoding import ChunkCodec
from shardpipe.errors import (
    ConditionFailedError,
    InvalidArgumentError,
    JobConflictError,
    MemoryBudgetError,
    PlanError,
)
from shardpipe.existing import (
    ExistingArray,
    appended_shape,
    check_source_dtype,
    check_strategy,
    check_unchanged_settings,
    metadata_bytes,
    read_metadata,
    region_offset,
)
from shardpipe.formats.zarr_sharding import ZarrShardingFormat
from shardpipe.graph import build_write_graph
from shardpipe.journal import (
    JOB_DIR,
    JobKeys,
    JobMarker,
    acquire,
    conflict,
    read_marker,
    recover,
    release,
)
from shardpipe.metadata import format_of, layout_of
from shardpipe.progress import run_publishing, runs_in_process
from shardpipe.storage.resolve import ResolvedStore, resolve_store
from shardpipe.tasks import WriteReport, WriteTarget, finish_write
from shardpipe.updating import UpdateTarget
from shardpipe.validate import (
    as_dask_array,
    build_metadata,
    check_array,
    check_attributes,
    check_bool,
    check_dimension_names,
    check_fill_value,
    check_index_location,
    check_max_mem,
    check_source_is_not_target,
    check_target,
    resolve_shapes,
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
    """

    def __init__(
        self,
        source: da.Array,
        target: ResolvedStore,
        create_kwargs: dict[str, Any],
        metadata: ArrayV3Metadata,
        plan: WritePlan,
        *,
        overwrite: bool,
        write_empty_chunks: bool,
        existing: ExistingArray | None = None,
        rewrite_fits: bool = True,
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
        memory = ", ".join(f"{k} {format_bytes(m.nbytes)}" for k, m in sorted(peaks.items()))
        tasks = ", ".join(f"{k} {n:,}" for k, n in sorted(plan.task_counts.items()))
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
                f"{plan.n_parts:,} parts of up to {plan.part_chunks} inner chunks)",
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
        rows = self.summary_rows()
        width = max(len(label) for label, _ in rows)
        lines = [f"{label:>{width}}: {value}" for label, value in rows]
        return "ShardedWrite\n" + "\n".join("  " + line for line in lines)

    def _repr_html_(self) -> str:
        cells = "".join(
            f"<tr><th style='text-align:left'>{html.escape(label)}</th>"
            f"<td style='text-align:left'>{html.escape(value)}</td></tr>"
            for label, value in self.summary_rows()
        )
        return f"<div><strong>ShardedWrite</strong><table>{cells}</table></div>"

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
        target_d = delayed(create_array, pure=False)(
            self.target,
            self._create_kwargs,
            self.overwrite,
            self._write_target(token),
            dask_key_name=f"create-array-{token}",
        )
        graph = build_write_graph(self.source, self.plan, target_d, self._key_of(), token)
        return graph.result

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
        progress = check_bool("progress", progress)
        start = time.perf_counter()
        token = uuid.uuid4().hex
        store, keys = self.target.shards, self.keys
        marker = acquire(store, keys, "write" if self.existing is None else "update")
        try:
            if self.existing is None:
                write_target = create_array(
                    self.target,
                    self._create_kwargs,
                    self.overwrite,
                    self._write_target(token),
                    marker,
                )
                target: WriteTarget | UpdateTarget = write_target
            else:
                write_target = self._write_target(token)
                target = self._update_target(write_target, marker)
            graph = build_write_graph(
                self.source,
                self.plan,
                target,
                self._key_of(),
                token,
                in_process=runs_in_process(self.source),
                update=self.existing is not None,
            )
            try:
                reports = run_publishing(graph.publishing, show=progress)
            except BaseException as err:
                self._undo_failed(err, write_target)
                raise
            report = finish_write(write_target, *reports)
            if self.existing is not None and self.existing.grown is not None:
                self._publish_grown(self.existing)
        finally:
            release(store, keys, marker)
        report = replace(report, seconds=time.perf_counter() - start)
        log.info("shardpipe: %s", report)
        return report

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
        )

    def _undo_failed(self, err: BaseException, write_target: WriteTarget) -> None:
        """After a failed run: roll back shards left mid-update, remove staging data."""
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

    def open(self) -> zarr.Array[Any]:
        """Open the written array for reading and writing."""
        return zarr.open_array(self.target.zarr_store, path=self.target.path, mode="r+")


def create_array(
    target: ResolvedStore,
    create_kwargs: dict[str, Any],
    overwrite: bool,
    write_target: WriteTarget,
    holder: JobMarker | None = None,
) -> WriteTarget:
    """Check the target again (it may have changed since planning), then write the metadata.

    ``holder`` is this job's marker, when it holds one; without it, a marker
    of another job that may still run is an error. Returns ``write_target``
    unchanged, so that tasks can depend on the metadata being written.
    """
    check_no_other_job(target, holder, "write the array")
    check_target(target, overwrite)
    if overwrite:
        _remove_node(target)
    zarr.create_array(target.zarr_store, name=target.path or None, **create_kwargs)
    return write_target


def check_no_other_job(target: ResolvedStore, holder: JobMarker | None, doing: str) -> None:
    """Refuse to go on while another job that may still run holds the array."""
    keys = JobKeys(target.key(""))
    other = read_marker(target.shards, keys)
    if other is not None and (holder is None or other.job != holder.job) and not other.is_stale():
        raise conflict(other, keys, doing)


def _remove_node(target: ResolvedStore) -> None:
    """Delete every key of the node at the target except shardpipe's own records."""
    store = target.shards
    prefix = target.key("")
    for key in list(store.list(prefix)):
        if not key.startswith(f"{prefix}{JOB_DIR}/"):
            store.delete(key)


def prepare_write(
    arr: Any,
    store: Any,
    *,
    path: str | None = None,
    shards: Any = None,
    chunks: Any = None,
    compressors: Any = "auto",
    filters: Any = None,
    serializer: Any = "auto",
    fill_value: Any = None,
    index_location: str | None = None,
    dimension_names: Any = None,
    attributes: dict[str, Any] | None = None,
    overwrite: bool = False,
    storage_options: dict[str, Any] | None = None,
    write_empty_chunks: bool = False,
    max_mem: int | str = DEFAULT_MAX_MEM,
    region: Any = None,
    append_dim: int | None = None,
    write_strategy: str = "auto",
) -> ShardedWrite:
    """Validate and plan a write of ``arr`` to a sharded Zarr v3 array; write nothing.

    Parameters are those of :func:`~shardpipe.to_sharded_zarr` (without
    ``progress`` and ``compute``, which belong to running the job).

    Returns
    -------
    ShardedWrite
        The planned write: ``print`` it to see the plan, call ``execute()``
        to run it, or ``to_delayed()`` to compute it later.

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        On bad arguments (naming the parameter, the value and the fix).
    shardpipe.errors.MemoryBudgetError
        If a task cannot fit ``max_mem``.
    shardpipe.errors.ArrayExistsError
        If a node exists at ``path`` and ``overwrite`` is False.
    shardpipe.errors.StoreNotWritableError
        If the store cannot be written.
    """
    check_array(arr)
    overwrite = check_bool("overwrite", overwrite)
    write_empty_chunks = check_bool("write_empty_chunks", write_empty_chunks)
    strategy = check_strategy(write_strategy)
    if region is not None or append_dim is not None:
        settings = dict(
            shards=shards,
            chunks=chunks,
            index_location=index_location,
            compressors=compressors,
            filters=filters,
            serializer=serializer,
            fill_value=fill_value,
            dimension_names=dimension_names,
            attributes=attributes,
        )
        return _prepare_update(
            arr,
            resolve_store(store, path, storage_options),
            settings,
            overwrite=overwrite,
            write_empty_chunks=write_empty_chunks,
            budget=check_max_mem(max_mem),
            region=region,
            append_dim=append_dim,
            strategy=strategy,
        )
    if strategy != "auto":
        raise InvalidArgumentError(
            "write_strategy",
            f"{strategy!r} applies to shards that exist; a new array is written whole",
            "Leave write_strategy out, or pass region= or append_dim=",
        )
    shard_shape, chunk_shape = resolve_shapes(arr.shape, arr.dtype.itemsize, shards, chunks)
    array = as_dask_array(arr, shard_shape)
    location = check_index_location("end" if index_location is None else index_location)
    check_fill_value(fill_value, array.dtype)
    check_dimension_names(dimension_names, array.ndim)
    check_attributes(attributes)
    budget = check_max_mem(max_mem)
    create_kwargs: dict[str, Any] = dict(
        shape=array.shape,
        dtype=array.dtype,
        chunks=chunk_shape,
        shards={"shape": shard_shape, "index_location": location},
        compressors=compressors,
        filters=filters,
        serializer=serializer,
        fill_value=fill_value,
        dimension_names=dimension_names,
        attributes=attributes,
    )
    metadata = build_metadata(**create_kwargs)
    target = resolve_store(store, path, storage_options)
    check_source_is_not_target(array, target)
    layout = ShardLayout(tuple(array.shape), shard_shape, chunk_shape)
    codec = ChunkCodec.from_metadata(metadata)
    plan = _plan(Placement.whole(layout, BlockGrid(array.chunks)), codec, budget, target, metadata)
    check_target(target, overwrite)
    return ShardedWrite(
        array,
        target,
        create_kwargs,
        metadata,
        plan,
        overwrite=overwrite,
        write_empty_chunks=write_empty_chunks,
    )


def _prepare_update(
    arr: Any,
    target: ResolvedStore,
    settings: dict[str, Any],
    *,
    overwrite: bool,
    write_empty_chunks: bool,
    budget: int,
    region: Any,
    append_dim: Any,
    strategy: str,
) -> ShardedWrite:
    """Validate and plan a region write or an append into the existing array at ``target``."""
    parameter = "region" if region is not None else "append_dim"
    if region is not None and append_dim is not None:
        raise InvalidArgumentError(
            "region", "region and append_dim were both given", "Pass one of them"
        )
    if overwrite:
        raise InvalidArgumentError(
            "overwrite",
            f"overwrite=True replaces the whole array, which contradicts {parameter}",
            f"Pass overwrite=True without {parameter} to replace the array, or leave it out",
        )
    check_no_other_job(target, None, f"write into the array ({parameter})")
    metadata, version = read_metadata(target, parameter)
    check_source_dtype(arr.dtype, metadata)
    check_unchanged_settings(metadata, **settings)
    old_shape = tuple(metadata.shape)
    if region is not None:
        shape, offset = old_shape, region_offset(region, old_shape, tuple(arr.shape))
        grown = None
    else:
        shape, offset = appended_shape(append_dim, old_shape, tuple(arr.shape))
        grown = metadata.update_shape(shape)
    layout = layout_of(grown or metadata)
    array = as_dask_array(arr, layout.shard_shape)
    check_source_is_not_target(array, target)
    store = target.shards
    abilities = store.abilities
    if strategy == "in_place" and not abilities.write_at:
        raise InvalidArgumentError(
            "write_strategy",
            f"'in_place' needs writes at an offset, which {type(store).__name__} cannot do",
            "Use 'auto', 'append' (S3) or 'rewrite'",
        )
    if strategy == "append" and not (
        abilities.append or (abilities.parts and abilities.copy_range)
    ):
        raise InvalidArgumentError(
            "write_strategy",
            f"'append' needs appends or server-side range copies, which "
            f"{type(store).__name__} cannot do",
            "Use 'auto' or 'rewrite'",
        )
    target_metadata = grown or metadata
    codec = ChunkCodec.from_metadata(target_metadata)
    placement = Placement(layout, BlockGrid(array.chunks), offset)
    plan = _plan(placement, codec, budget, target, target_metadata)
    if plan.max_parts_per_shard > 1:
        raise MemoryBudgetError(
            "update-shard",
            plan.max_projected_mem * plan.max_parts_per_shard,
            budget,
            "an update holds the touched inner chunks of a shard in one task; raise max_mem "
            "or write the region in smaller pieces",
        )
    shard_nbytes = math.prod(layout.shard_shape) * codec.dtype.itemsize
    rewrite_mem = plan.max_projected_mem + plan.model.encoded(shard_nbytes)
    rewrite_fits = rewrite_mem <= budget
    if strategy == "rewrite" and not rewrite_fits:
        raise MemoryBudgetError(
            "update-shard",
            rewrite_mem,
            budget,
            "a rewrite holds the whole old shard; raise max_mem, or use write_strategy "
            "'append' or 'in_place'",
        )
    existing = ExistingArray(metadata, version, offset, grown, strategy)
    return ShardedWrite(
        array,
        target,
        {},
        target_metadata,
        plan,
        overwrite=False,
        write_empty_chunks=write_empty_chunks,
        existing=existing,
        rewrite_fits=rewrite_fits,
    )


def _plan(
    placement: Placement,
    codec: ChunkCodec,
    budget: int,
    target: ResolvedStore,
    metadata: ArrayV3Metadata,
) -> WritePlan:
    store = target.shards
    expansion, overhead = codec.expansion
    itemsize = codec.dtype.itemsize
    model = MemoryModel(
        chunk_nbytes=math.prod(placement.layout.chunk_shape) * itemsize,
        expansion=expansion,
        chunk_overhead=overhead,
        join_copies=store.abilities.joins_buffers,
        min_part_nbytes=store.min_part_size,
    )
    shard_format = format_of(metadata)
    stamp = shard_format.head_nbytes(store.min_part_size) + shard_format.index_nbytes()
    try:
        plan = plan_write(
            placement,
            itemsize,
            budget,
            model=model,
            max_parts=store.max_parts,
            stamp_nbytes=stamp,
        )
    except MemoryBudgetError:
        raise
    except PlanError as err:
        raise InvalidArgumentError("max_mem", str(err), "See the message for the fix") from err
    if plan.max_parts_per_shard > 1 and not store.supports_parts:
        raise InvalidArgumentError(
            "max_mem",
            f"shards of {plan.layout.shard_shape} do not fit max_mem={budget} and "
            f"{type(store).__name__} cannot write a shard in parts",
            "Raise max_mem, use smaller shards, or write to a local path or S3",
        )
    return plan
