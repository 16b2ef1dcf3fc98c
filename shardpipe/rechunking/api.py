"""Rechunk an existing array into a sharded Zarr v3 array: ``plan_rechunk``, ``rechunk``.

The source (a Zarr v2 or v3 array, sharded or not, by path, URL or object;
or any Dask array) is read in Dask blocks aligned to its chunks (its shards,
if sharded) and as large as the memory budget allows
(:mod:`shardpipe.core.source_blocks`); the blocks go to the ordinary write plan,
which writes whole shards where a block holds them, gathers encoded pieces
where blocks straddle shards, and writes parts of shards as blocks are read.
One pass, unless the affordable blocks are thinner than the inner chunks
and ``temp_store`` is given or one pass would hold too much: then two,
through an intermediate copy (:mod:`shardpipe.rechunking.intermediate`),
which a resumed rechunk finds again by its record
(:mod:`shardpipe.rechunking.copy_record`).

What carries over from a Zarr source unless given: dtype, fill value,
dimension names (Zarr v3 ``dimension_names``, or the ``_ARRAY_DIMENSIONS``
attribute of xarray's Zarr v2 convention) and attributes. The codecs do not:
they default to shardpipe's defaults for the target (zstd inner chunks),
whatever the source used.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Unpack

import dask.array as da
import zarr
from dask.delayed import Delayed

from shardpipe.core.checks import check_json, check_progress
from shardpipe.core.grid import Shape
from shardpipe.core.memory import HOLD_SHARE
from shardpipe.core.plan_costs import SMALLER_BLOCKS, TWO_PASSES, block_budget
from shardpipe.core.rechunk_plans import weigh_plans
from shardpipe.core.source_blocks import (
    intermediate_chunks,
    read_block_shape,
    read_cost,
    straddles,
)
from shardpipe.errors import InvalidArgumentError, MemoryBudgetError
from shardpipe.rechunking.copy_record import check_same_copy, copy_identity, read_copy_record
from shardpipe.rechunking.intermediate import Intermediate
from shardpipe.rechunking.job import RechunkJob
from shardpipe.rechunking.memory import automatic_temp_store, copy_is_local, one_pass_hold
from shardpipe.rechunking.options import RECHUNK_PARAMETERS, RechunkOptions
from shardpipe.rechunking.source import Source, open_source
from shardpipe.storage.resolve import ResolvedStore
from shardpipe.stored.locations import locations_read
from shardpipe.stored.places import (
    check_reads_apart,
    check_source_options,
    check_temp_store,
    resolve_named,
)
from shardpipe.write.api import snapshot_id_returned
from shardpipe.write.arguments import check_run, resolve_shapes
from shardpipe.write.job import RunOptions, ShardedWrite, run_checked_job
from shardpipe.write.options import DEFAULT_ARRAY_OPTIONS, ArrayOptions, check_array_options
from shardpipe.write.parameters import shares_parameters
from shardpipe.write.prepare import prepare_checked
from shardpipe.write.resume import check_new_target, check_same_job, complete_shards


def source_identity(source: Source) -> dict[str, Any]:
    """What a rechunk's job record says of its source: name, shape, dtype and read unit.

    Unlike the Dask name of the blocks, this does not depend on the block
    shape the plan chose, so a resumed rechunk with another ``max_mem`` is
    still the same job.
    """
    return {
        "rechunk": source.name,
        "shape": list(source.shape),
        "dtype": str(source.dtype),
        "read_unit": list(source.read_unit),
    }


@shares_parameters(RECHUNK_PARAMETERS)
def plan_rechunk(source: Any, target: Any, **options: Unpack[RechunkOptions]) -> RechunkJob:
    """Plan a rechunk of ``source`` into a sharded array at ``target``; write nothing.

    The parameters are those of :func:`rechunk` but ``progress``,
    ``compute``, ``commit`` and ``rebase``, which belong to running the job
    (:meth:`~shardpipe.RechunkJob.execute`). With ``resume``, the shards of the target
    that are complete (their index verifies) are found here and left out of
    the plan.

    Parameters
    ----------

    Returns
    -------
    RechunkJob
        The planned rechunk: ``print`` it to see how the source is read and
        the target written, call ``execute()`` to run it.

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        On a bad argument or a source that cannot be opened.
    shardpipe.errors.MemoryBudgetError
        If no block shape lets every task fit ``max_mem``.
    """
    return plan_checked_rechunk(
        source,
        target,
        check_array_options(options),
        source_storage_options=options.get("source_storage_options"),
        temp_store=options.get("temp_store"),
    )


def plan_checked_rechunk(
    source: Any,
    target: Any,
    given: ArrayOptions,
    *,
    source_storage_options: dict[str, Any] | None = None,
    temp_store: str | os.PathLike[str] | None = None,
) -> RechunkJob:
    """:func:`plan_rechunk` with its array options checked already (``given``, by
    :func:`~shardpipe.write.options.check_array_options`): a group rechunk plans each of
    its arrays with the options its door checked once, and neither checks them again."""
    opened = open_source(source, check_source_options(source, source_storage_options))
    if given.attributes is None:  # carried over: JSON must hold them (the source's JSON may not)
        check_json(
            "source",
            opened.attributes,
            "attributes",
            f"The source {opened.name!r} holds them; pass attributes= to write others "
            "(e.g. the same without that value)",
        )
    budget, overwrite, resume = given.max_mem, given.overwrite, given.resume
    resolved = resolve_named("target", target, given.path, given.storage_options)
    check_reads_apart(
        resolved,
        locations_read(opened.array),
        parameter="target",
        fix="Rechunk into another path, then delete the source and move the new array into "
        "its place",
    )
    check_new_target(resolved, overwrite or bool(resume), name="target")
    record = read_copy_record(resolved)  # of a two-pass rechunk that did not finish here
    recorded = None if record is None else record["store"]  # the same call's copy may exist
    temp_store = check_temp_store(temp_store, resolved, opened.array, recorded)
    resuming = bool(resume) and resolved.shards.get(resolved.key("zarr.json")) is not None
    shard_shape, chunk_shape = resolve_shapes(
        opened.shape, opened.dtype.itemsize, given.shards, given.chunks
    )
    fill_value, names, attributes = given.fill_value, given.dimension_names, given.attributes
    carried = dict(
        fill_value=opened.fill_value if fill_value is None else fill_value,
        dimension_names=opened.dimension_names if names is None else names,
        attributes=opened.attributes if attributes is None else attributes,
    )

    checked = replace(  # each try of a block shape plans with these, checked above
        DEFAULT_ARRAY_OPTIONS,
        shards=shard_shape,
        chunks=chunk_shape,
        compressors=given.compressors,
        filters=given.filters,
        chunk_checksums=given.chunk_checksums,
        index_location=given.index_location,
        overwrite=overwrite or resuming,
        max_mem=budget,
        **carried,
    )

    def prepare(read: Source, block_shape: Shape) -> ShardedWrite:
        # a part is at most one block's share of a shard: written as soon as the block is read
        share = math.prod(min(b, s) for b, s in zip(block_shape, shard_shape, strict=True))
        return prepare_checked(  # the options checked once, above: not at every try
            read.blocks(block_shape),
            resolved,  # resolved once: every try of a block shape writes the same place
            checked,
            part_limit=share * opened.dtype.itemsize,
            source_identity=source_identity(read),
        )

    block_shape, write = _largest_fitting(opened, shard_shape, chunk_shape, budget, prepare)
    found = record if resume and record is not None else None
    place = temp_store
    if place is None:
        place = found["store"] if found is not None else automatic_temp_store(resolved)
    weighed = weigh_plans(
        opened.shape,
        opened.dtype.itemsize,
        opened.read_unit,
        shard_shape,
        chunk_shape,
        budget,
        raw_copy=place is not None and copy_is_local(place),
    )
    if weighed.chosen.kind == SMALLER_BLOCKS and not isinstance(opened.array, da.Array):
        block_shape, write = _smaller_blocks(
            opened, weighed.chosen.block_shape, (block_shape, write), budget, prepare
        )
    cost = read_cost(opened.shape, opened.dtype.itemsize, opened.read_unit, block_shape)
    straddling = straddles(block_shape, shard_shape, chunk_shape)
    held = one_pass_hold(write) if straddling else 0
    copies = weighed.chosen.kind == TWO_PASSES or held > HOLD_SHARE * budget
    automatic = temp_store is None and straddling and copies
    if automatic:  # two passes, the copy beside the target
        temp_store = place

    def resumable(write: ShardedWrite) -> ShardedWrite:
        """``write``, keeping the shards an interrupted run of it completed (``resume``)."""
        if not resuming:
            return write
        assert write.identity is not None
        check_same_job(resolved, write.identity, resume)
        return write.resumed(complete_shards(resolved, write.metadata, write.layout), resume)

    if temp_store is not None and straddling:
        weighed_copy = next((c for c in weighed.candidates if c.kind == TWO_PASSES), None)
        if weighed_copy is not None and not isinstance(opened.array, da.Array):
            block_shape = weighed_copy.block_shape  # the copy's blocks, as the model weighed it
            cost = read_cost(opened.shape, opened.dtype.itemsize, opened.read_unit, block_shape)
        inter_chunks = intermediate_chunks(
            opened.shape,
            block_shape,
            shard_shape,
            chunk_shape,
            opened.dtype.itemsize,
            block_nbytes=block_budget(budget, math.prod(opened.shape) * opened.dtype.itemsize),
        )
        identity = copy_identity(source_identity(opened), inter_chunks)
        if found is not None:
            check_same_copy(found, identity, None if automatic else os.fspath(temp_store))
        planned = Source("the intermediate copy", opened.array, inter_chunks, planned=True)
        second_blocks, second = _largest_fitting(planned, shard_shape, chunk_shape, budget, prepare)
        where = os.fspath(temp_store)
        if resuming:  # the target's job must be the second pass from the copy at where
            _check_resumed_from(resolved, second, where, resume, found is not None)
        inter = Intermediate(
            where,
            {k: v for k, v in (given.storage_options or {}).items() if k != "fsync"}
            if "://" in where
            else None,
            inter_chunks,
            block_shape,
            cost,
            placed=found["placed"] if found is not None else automatic,
            found=found["state"] if found is not None else None,
            identity=identity,
        )
        second_cost = read_cost(opened.shape, opened.dtype.itemsize, inter_chunks, second_blocks)
        return RechunkJob(
            planned,
            second_blocks,
            second_cost,
            second,
            inter,
            opened,
            straddling,
            lambda copy, blocks: resumable(prepare(copy, blocks)),
            held=held,
            one_pass=write if automatic and not resuming else None,
            stale=record if found is None else None,
            weighed=weighed,
        )
    return RechunkJob(
        opened,
        block_shape,
        cost,
        resumable(write),
        straddles=straddling,
        held=held,
        stale=record,
        weighed=weighed,
    )


def _check_resumed_from(
    target: ResolvedStore, second: ShardedWrite, where: str, resume: Any, recorded: bool
) -> None:
    """Refuse, before any copy is made, to resume into a target that the second pass from
    the copy at ``where`` (``recorded`` for this target, or to be made) did not write."""
    assert second.identity is not None
    planned = second.identity
    expected = {**planned, "source": {**planned["source"], "rechunk": where}}
    try:
        check_same_job(target, expected, resume)
    except InvalidArgumentError as err:
        err.add_note(
            f"shardpipe: the target was not written from the copy recorded at {where!r}"
            if recorded
            else "shardpipe: no copy of an interrupted first pass is recorded for this target: "
            "the rechunk that wrote it finished (verify with complete=True, or `shardpipe "
            "verify --complete`, says whether every shard is there) or was another job"
        )
        raise


def _smaller_blocks(
    source: Source,
    block_shape: Shape,
    largest: tuple[Shape, ShardedWrite],
    budget: int,
    prepare: Callable[[Source, Shape], ShardedWrite],
) -> tuple[Shape, ShardedWrite]:
    """The plan with the cost model's smaller blocks, if its write plan fits; else ``largest``.

    Its blocks read some source units more than once, but hold less between
    tasks than the largest aligned blocks.
    """
    try:
        write = prepare(source, block_shape)
    except MemoryBudgetError:
        return largest
    if one_pass_hold(write) > HOLD_SHARE * budget:
        return largest
    return block_shape, write


def _largest_fitting(
    source: Source,
    shard_shape: Shape,
    chunk_shape: Shape,
    budget: int,
    prepare: Callable[[Source, Shape], ShardedWrite],
) -> tuple[Shape, ShardedWrite]:
    """Plan with the largest blocks whose write plan fits ``budget``; halve until one does."""
    if isinstance(source.array, da.Array) and not source.planned:
        return source.read_unit, prepare(source, source.read_unit)
    itemsize = source.dtype.itemsize
    most = block_budget(budget, math.prod(source.shape) * itemsize)
    tried: set[Shape] = set()
    last_error: MemoryBudgetError | None = None
    while True:
        block = read_block_shape(
            source.shape, itemsize, source.read_unit, shard_shape, chunk_shape, most
        )
        if block in tried:
            assert last_error is not None
            raise last_error
        tried.add(block)
        try:
            return block, prepare(source, block)
        except MemoryBudgetError as err:
            last_error = err
            most //= 2


@shares_parameters(RECHUNK_PARAMETERS)
def rechunk(
    source: Any,
    target: Any,
    *,
    compute: bool = True,
    progress: bool = False,
    commit: str | None = None,
    rebase: bool = False,
    **options: Unpack[RechunkOptions],
) -> zarr.Array[Any] | Delayed | str:
    """Rechunk ``source`` into a sharded Zarr v3 array at ``target``, in bounded memory.

    The source is read in the largest blocks aligned to its chunks (its
    shards, if sharded) with which every task fits ``max_mem``. The target's
    codecs are those given or shardpipe's defaults, not the source's; its
    fill value, dimension names and attributes are the source's unless given.

    Parameters
    ----------

    Returns
    -------
    zarr.Array or dask.delayed.Delayed
        The target array. With ``compute=False``, Dask's convention: the
        delayed rechunk, which computes to a :class:`~shardpipe.WriteReport`.
        Deprecated: with ``commit``, the Icechunk snapshot's id, with a
        ``FutureWarning`` (from 0.3: the array; the id is on the report of
        ``plan_rechunk(...).execute(commit=...)``).
    """
    progress, compute = check_progress(progress, compute)
    job = plan_rechunk(source, target, **options)
    run = RunOptions(progress, *check_run(commit, rebase, job.target))
    if not compute:
        return job.to_delayed()
    report = run_checked_job(job, run)
    if report.snapshot_id is not None:
        return snapshot_id_returned("rechunk", "shardpipe.plan_rechunk", report.snapshot_id)
    return job.write.open()
