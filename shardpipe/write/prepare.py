"""Validate and plan a write into a :class:`~shardpipe.write.job.ShardedWrite`, writing nothing.

:func:`prepare_write` is the one door: a new array (the whole array is the
region), a region write into an existing array, or an append that grows it.
Every argument is checked against the source and, for updates, against the
existing array's metadata; the store is resolved; the write is planned and
its memory checked. Nothing touches storage but reads.
"""

from __future__ import annotations

import json
import math
import uuid
from typing import Any, Unpack

import dask.array as da
import numpy as np

from shardpipe import advice
from shardpipe.codec.checksums import checksummed_compressors
from shardpipe.codec.chunk_codec import ChunkCodec
from shardpipe.core.checks import check_dimension_names, check_int, check_json_dict
from shardpipe.core.grid import BlockGrid, Coords, ShardLayout
from shardpipe.core.plan import WritePlan
from shardpipe.core.region import Placement
from shardpipe.core.waves import WaveSchedule
from shardpipe.engine.scheduler import check_store_reachable
from shardpipe.engine.source_window import in_shard_blocks, views_in_blocks
from shardpipe.errors import InvalidArgumentError, MemoryBudgetError
from shardpipe.internals.zarr_core import ArrayV3Metadata
from shardpipe.journal.job_record import job_identity, waves_done
from shardpipe.storage.resolve import ResolvedStore, resolve_store
from shardpipe.stored.metadata import format_of, layout_of, metadata_bytes, read_metadata
from shardpipe.stored.places import check_source_is_not_target
from shardpipe.write.arguments import (
    ExistingArray,
    append_axis,
    appended_shape,
    as_dask_array,
    build_metadata,
    cast_source,
    check_array,
    check_castable,
    check_fill_value,
    check_source_dtype,
    check_strategy_possible,
    check_unchanged_settings,
    check_writable,
    region_offset,
    resolve_shapes,
)
from shardpipe.write.job import ShardedWrite
from shardpipe.write.modes import FillExisting, NewArray
from shardpipe.write.options import (
    ARRAY_PARAMETERS,
    ArrayOptions,
    WriteOptions,
    check_array_options,
)
from shardpipe.write.parameters import shares_parameters
from shardpipe.write.planning import checked_plan
from shardpipe.write.resume import (
    Resume,
    check_new_target,
    check_no_other_job,
    check_same_job,
    complete_shards,
    finished_shards,
    update_identity,
)
from shardpipe.write.update_mode import Update


@shares_parameters(ARRAY_PARAMETERS)
def prepare_write(
    arr: Any,
    store: Any,
    *,
    part_limit: int | None = None,
    source_identity: dict[str, Any] | None = None,
    **options: Unpack[WriteOptions],
) -> ShardedWrite:
    """Validate and plan a write of ``arr`` to a sharded Zarr v3 array; write nothing.

    The parameters are those of :func:`~shardpipe.to_sharded_zarr` but
    ``progress``, ``compute``, ``commit`` and ``rebase``, which belong to
    running the job (:meth:`~shardpipe.ShardedWrite.execute`), and two for
    front-ends built on it. With ``resume``, the complete shards of an
    interrupted run of the same write are found here (their indexes are
    read) and left out of the plan.

    Parameters
    ----------
    part_limit : int, optional
        At most this many raw bytes per part where the store can write
        shards in parts (new arrays only): :func:`~shardpipe.rechunk` sets it
        to one block's share of a shard, so that blocks are written as they
        are read instead of waiting in memory for the rest of their shard.
    source_identity : dict, optional
        What the job record says the source is (default: the Dask array's
        name; see :mod:`shardpipe.write.resume`).

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
    if part_limit is not None:
        part_limit = check_int("part_limit", part_limit, example=64 << 20)
    check_json_dict("source_identity", source_identity)
    # the chunk_checksums of region writes and appends are checked, then the stored chain kept
    given = check_array_options(options)
    return prepare_checked(
        arr, store, given, part_limit=part_limit, source_identity=source_identity
    )


def prepare_checked(
    arr: Any,
    store: Any,
    given: ArrayOptions,
    *,
    part_limit: int | None = None,
    source_identity: dict[str, Any] | None = None,
) -> ShardedWrite:
    """:func:`prepare_write` with its arguments checked already (``given`` by
    :func:`~shardpipe.write.options.check_array_options`): a job that plans again
    (a rechunk trying smaller blocks) does not check its options again.

    What depends on the array (its dtype against ``fill_value``, its rank
    against ``dimension_names``) and on the store is checked here.
    """
    settings: dict[str, Any] = dict(
        compressors=given.compressors,
        filters=given.filters,
        serializer=given.serializer,
        fill_value=given.fill_value,
        dimension_names=given.dimension_names,
        attributes=given.attributes,
    )
    if given.region is not None or given.append_dim is not None:
        layout_settings = dict(
            shards=given.shards, chunks=given.chunks, index_location=given.index_location
        )
        return _prepare_update(
            arr,
            _resolved(store, given.path, given.storage_options, given.resume),
            {**layout_settings, **settings},
            overwrite=given.overwrite,
            write_empty_chunks=given.write_empty_chunks,
            budget=given.max_mem,
            region=given.region,
            append_dim=given.append_dim,
            strategy=given.write_strategy,
            resume=bool(given.resume),
        )
    if given.write_strategy != "auto":
        raise InvalidArgumentError(
            "write_strategy",
            f"{given.write_strategy!r} applies to shards that exist; a new array is written whole",
            f"Leave {advice.name('write_strategy')} out, or pass {advice.name('region')} or "
            f"{advice.name('append_dim')}",
        )
    shard_shape, chunk_shape = resolve_shapes(
        arr.shape, arr.dtype.itemsize, given.shards, given.chunks
    )
    array = as_dask_array(arr, shard_shape)
    check_fill_value(given.fill_value, array.dtype)
    check_dimension_names(given.dimension_names, array.ndim)
    settings["compressors"] = checksummed_compressors(
        given.compressors, array.dtype, chunk_checksums=given.chunk_checksums
    )
    target = _resolved(store, given.path, given.storage_options, given.resume)
    create_kwargs: dict[str, Any] = dict(
        shape=array.shape,
        dtype=array.dtype,
        chunks=chunk_shape,
        shards={"shape": shard_shape, "index_location": _index_location(given, target)},
        **settings,
    )
    metadata = build_metadata(**create_kwargs)
    check_source_is_not_target(array, target)
    check_store_reachable(array, target)
    resuming = bool(given.resume) and target.shards.get(target.key("zarr.json")) is not None
    layout = ShardLayout(tuple(array.shape), shard_shape, chunk_shape)
    codec = ChunkCodec.from_metadata(metadata)
    source, plan = _source_and_plan(
        array, layout, codec, given.max_mem, target, metadata, part_limit=part_limit
    )
    if source_identity is None:  # a NumPy array is not hashed (see as_dask_array)
        in_memory = not isinstance(arr, da.Array)
        source_identity = {"numpy": "not hashed"} if in_memory else {"dask": array.name}
    identity = job_identity(source_identity, json.loads(metadata_bytes(metadata)))
    if not resuming:
        check_new_target(target, given.overwrite)
    job = ShardedWrite(
        source,
        target,
        metadata,
        plan,
        NewArray(create_kwargs, given.overwrite, identity),
        write_empty_chunks=given.write_empty_chunks,
    )
    if resuming:
        record = check_same_job(target, identity, given.resume)
        job = _resumed(job, record, complete_shards(target, metadata, layout), given.resume)
    return job


def _index_location(given: ArrayOptions, target: ResolvedStore) -> str:
    """Where new shards keep their index: as asked, else at the end, or at the start where
    readers cannot fetch an object's last bytes without its size (Azure: no suffix ranges)."""
    if given.index_location is not None:
        return str(given.index_location)
    return "end" if target.shards.abilities.suffix_ranges else "start"


def _resolved(
    store: Any, path: str | None, storage_options: dict[str, Any] | None, resume: Resume
) -> ResolvedStore:
    """The write's target; ``resume`` refused where there is nothing to resume (Icechunk)."""
    target = resolve_store(store, path, storage_options)
    check_writable(target)
    if resume and target.transactional:
        raise InvalidArgumentError(
            "resume",
            f"{resume!r}, but an Icechunk write that did not finish left nothing to resume "
            "(its changes never reached a commit)",
            "Write again in a writable session, without resume",
        )
    return target


def _resumed(
    job: ShardedWrite, record: dict[str, Any], complete: frozenset[Coords], resume: Resume
) -> ShardedWrite:
    """``job`` carrying on the run its record describes: its waves, its complete shards."""
    recorded = waves_done(record)
    if recorded is None:
        return job.resumed(complete, resume)
    wave_size, first_wave = recorded
    schedule = WaveSchedule(job.plan.placement.shard_ranges, wave_size)
    later = frozenset(c for c in complete if schedule.wave_of(c) >= first_wave)
    return job.resumed(later, resume, first_wave=first_wave, wave_size=wave_size)


def prepare_fill(
    arr: Any,
    target: ResolvedStore,
    *,
    budget: int,
    write_empty_chunks: bool = False,
) -> ShardedWrite:
    """Plan writing ``arr`` whole into a new, empty array whose metadata is already written.

    For callers that write the metadata themselves (the xarray accessor lets
    xarray write every array's metadata and attributes): the plan is that of
    a new array, shards larger than ``budget`` included, and the job creates
    nothing. The array must hold no shard yet (not checked: the caller has
    just created it); its shape and dtype must be ``arr``'s. ``budget`` (the
    ``max_mem`` in bytes) and ``write_empty_chunks`` are checked by the
    caller's door (:func:`~shardpipe.write.options.check_array_options`),
    once for all the arrays it fills.
    """
    check_array(arr)
    metadata, _ = read_metadata(target, "store")
    check_source_dtype(arr.dtype, metadata)
    if tuple(arr.shape) != tuple(metadata.shape):
        raise InvalidArgumentError(
            "arr",
            f"shape {tuple(arr.shape)} differs from the shape {metadata.shape} of the array "
            f"at {advice.place(target.path)}",
            f"Write a source of the array's shape, or use {advice.name('region')} for a part of it",
        )
    layout = layout_of(metadata)
    array = as_dask_array(arr, layout.shard_shape)
    check_source_is_not_target(array, target)
    check_store_reachable(array, target)
    codec = ChunkCodec.from_metadata(metadata)
    whole = Placement.whole(layout, BlockGrid(array.chunks))
    plan = checked_plan(whole, codec, budget, target, metadata)
    return ShardedWrite(
        array,
        target,
        metadata,
        plan,
        FillExisting(),
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
    resume: bool = False,
) -> ShardedWrite:
    """Validate and plan a region write or an append into the existing array at ``target``.

    With ``resume``, the shards an interrupted run of the same update
    finished (its records of them are kept until it completes) are left out.
    """
    parameter = "region" if region is not None else "append_dim"
    if region is not None and append_dim is not None:
        raise InvalidArgumentError(
            "region", "region and append_dim were both given", "Pass one of them"
        )
    if overwrite:
        raise InvalidArgumentError(
            "overwrite",
            f"{advice.setting('overwrite')} replaces the whole array, which contradicts "
            f"{advice.name(parameter)}",
            f"Pass {advice.setting('overwrite')} without {advice.name(parameter)} to replace the "
            "array, or leave it out",
        )
    check_no_other_job(target, None, f"write into the array ({parameter})")
    metadata, version = read_metadata(target, parameter)
    dtype = metadata.dtype.to_native_dtype()
    cast = check_castable(arr.dtype, dtype, "arr")
    check_unchanged_settings(metadata, **settings)
    old_shape = tuple(metadata.shape)
    if region is not None:
        shape, offset = old_shape, region_offset(region, old_shape, tuple(arr.shape))
        grown = None
    else:
        axis = append_axis(append_dim, metadata.dimension_names)
        shape, offset = appended_shape(axis, old_shape, tuple(arr.shape))
        grown = metadata.update_shape(shape)
    layout = layout_of(grown or metadata)
    if type(arr) in (np.ndarray, np.memmap):  # an update runs now: views, not a copy
        values = cast_source(arr, dtype, cast, "arr")  # checked whole before a byte is written
        array = views_in_blocks(values, layout.shard_shape, f"array-{uuid.uuid4().hex}")
    else:
        array = cast_source(as_dask_array(arr, layout.shard_shape), dtype, cast, "arr")
    check_source_is_not_target(array, target)
    check_store_reachable(array, target)
    store = target.shards
    abilities = store.abilities
    check_strategy_possible(strategy, store)
    composes = abilities.parts and abilities.copy_range
    target_metadata = grown or metadata
    codec = ChunkCodec.from_metadata(target_metadata)
    placement = Placement(layout, BlockGrid(array.chunks), offset)
    # in place, the old bytes of every range overwritten are kept (the undo record);
    # where that does not fit, "auto" does not go in place ("in_place" is refused)
    undo = abilities.write_at and strategy in ("auto", "in_place")
    try:
        plan: WritePlan | None = checked_plan(
            placement, codec, budget, target, target_metadata, undo=undo
        )
        in_place_fits = plan is not None and plan.max_parts_per_shard == 1
    except MemoryBudgetError:
        if not (undo and strategy == "auto"):
            raise
        plan, in_place_fits = None, False
    if plan is None or (undo and not in_place_fits and strategy == "auto"):
        undo = False
        plan = checked_plan(placement, codec, budget, target, target_metadata)
    if plan.max_parts_per_shard > 1:
        raise MemoryBudgetError(
            "update-shard",
            plan.max_projected_mem * plan.max_parts_per_shard,
            budget,
            "an update holds the touched inner chunks of a shard in one task; raise "
            f"{advice.name('max_mem')} or write the region in smaller pieces",
        )
    shard_nbytes = math.prod(layout.shard_shape) * codec.dtype.itemsize
    kept = plan.model.encoded(plan.part_nbytes) if undo else 0  # a rewrite keeps no undo
    rewrite_mem = plan.max_projected_mem - kept + plan.model.encoded(shard_nbytes)
    rewrite_fits = rewrite_mem <= budget
    if not rewrite_fits and (strategy == "rewrite" or not (abilities.append or composes)):
        raise MemoryBudgetError(
            "update-shard",
            rewrite_mem,
            budget,
            f"a rewrite holds the whole old shard; raise {advice.name('max_mem')}"
            + (", or use write_strategy 'append' or 'in_place'" if abilities.append else ""),
        )
    update = update_identity(array.name, offset, metadata)
    existing = ExistingArray(metadata, version, grown, strategy, update, in_place_fits)
    skip = finished_shards(target, update, plan, format_of(target_metadata))
    mode = Update(
        existing,
        rewrite_fits,
        skip if resume else frozenset(),
        arr if isinstance(arr, np.ndarray) else None,
    )
    return ShardedWrite(
        array, target, target_metadata, plan, mode, write_empty_chunks=write_empty_chunks
    )


def _source_and_plan(
    array: da.Array,
    layout: ShardLayout,
    codec: ChunkCodec,
    budget: int,
    target: ResolvedStore,
    metadata: ArrayV3Metadata,
    *,
    part_limit: int | None,
) -> tuple[da.Array, WritePlan]:
    """The blocks a new array is written from, and their plan.

    Blocks that are views of a NumPy array and do not line up with the
    shards are read in blocks of one shard
    (:func:`~shardpipe.engine.source_window.in_shard_blocks`) when that plan
    fits ``budget``; else, and for any other source, the blocks as given.
    """
    in_shards = in_shard_blocks(array, layout.shard_shape)
    if in_shards is not array:
        try:
            placement = Placement.whole(layout, BlockGrid(in_shards.chunks))
            plan = checked_plan(placement, codec, budget, target, metadata, part_limit=part_limit)
        except MemoryBudgetError:
            pass  # a shard's block would not fit max_mem: gather it from the smaller ones
        else:
            return in_shards, plan
    placement = Placement.whole(layout, BlockGrid(array.chunks))
    return array, checked_plan(placement, codec, budget, target, metadata, part_limit=part_limit)
