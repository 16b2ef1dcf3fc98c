"""Small updates run in the calling thread: no Dask graph, the same records as with one.

An update of one shard, or a few, from data already in memory (a NumPy
array) costs more to schedule than to do: building a graph, asking Dask
which scheduler runs it, handing tasks to a thread pool and back. Here the
shards' tasks are called one after another in the calling thread instead
(their inner chunks are still encoded several at once on idle cores,
:mod:`shardpipe.engine.encoders`). Everything that makes an update
crash-safe is the task's own and happens exactly as on a scheduler: the job
holds the array's marker (:mod:`shardpipe.write.run` takes and releases it
around this), each shard is changed behind its undo record (in place or
appended) or by one conditional put, and each finished shard is recorded
for ``resume``. On a failure the caller rolls back what was left mid-update.

:func:`run_batch` runs a batch of region writes
(:func:`shardpipe.write_regions`) the same way: one marker, one writer per
shard, no graph.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import numpy as np

from shardpipe.codec.chunk_codec import ChunkCodec
from shardpipe.core.grid import Box, Coords
from shardpipe.core.region_batch import ChunkFill
from shardpipe.core.shard_update import DEFAULT_UNUSED_THRESHOLD
from shardpipe.engine.batch_tasks import update_shard_from_regions
from shardpipe.engine.heap import in_heap_scope
from shardpipe.engine.publish_tasks import finish_write
from shardpipe.engine.reports import WriteReport
from shardpipe.engine.tasks import WriteTarget
from shardpipe.engine.update_tasks import UpdateTarget, update_shard
from shardpipe.journal.array_lock import release
from shardpipe.journal.markers import JobKeys
from shardpipe.storage.keys import STAGING_DIR
from shardpipe.storage.resolve import ResolvedStore
from shardpipe.stored.metadata import format_of, layout_of
from shardpipe.write.failure import undo_failed
from shardpipe.write.spec import WriteSpec
from shardpipe.write.started import StartedJob, take_for_update
from shardpipe.write.update_target import ExistingArray

IN_THREAD_MAX_SHARDS = 8
"""Most shards an update from a NumPy array may touch to run in the calling thread."""


def in_memory_source(jobs: Sequence[WriteSpec]) -> np.ndarray | None:
    """The NumPy source of a lone small update that can run in the calling thread, else None.

    That is one job, an update (a region write or an append) of at most
    :data:`IN_THREAD_MAX_SHARDS` shards from a NumPy array, outside an
    Icechunk session (whose writes are collected task by task).
    """
    if len(jobs) != 1:
        return None
    job = jobs[0]
    if job.existing is None or job.in_memory is None or job.target.transactional:
        return None
    if job.plan.n_shards - job.n_shards_skipped > IN_THREAD_MAX_SHARDS:
        return None
    return job.in_memory


def run_in_thread(started: StartedJob, source: np.ndarray) -> WriteReport:
    """Run the started update ``started`` from ``source`` in this thread; add up its reports.

    Each shard's ``update-shard`` task is called with the whole source as
    its one block (the task cuts the inner chunks it needs from it).
    """
    job, target = started.job, started.target
    assert isinstance(target, UpdateTarget)
    plan, key_of = job.plan, job.key_of()
    region = plan.placement.region
    reports = []
    for shard in plan.iter_shards():
        if shard.coords in job.skip:
            continue
        reports.append(
            in_heap_scope(
                update_shard,
                target,
                source,
                shard=shard.coords,
                key=key_of(shard.coords),
                part=shard.parts[0],
                block_boxes=(region,),
                coverage=shard.coverage,
            )
        )
    return finish_write(started.write_target, *reports)


def run_batch(
    target: ResolvedStore,
    existing: ExistingArray,
    groups: dict[Coords, list[ChunkFill]],
    boxes: Sequence[Box],
    data: Sequence[np.ndarray],
    *,
    rewrite_fits: bool,
    write_empty_chunks: bool,
    encoders: int,
) -> WriteReport:
    """Apply a checked batch: hold the array, write each shard in ``groups``, let go.

    The array's ``zarr.json`` must still be the version ``existing`` read
    (else :class:`~shardpipe.errors.JobConflictError`, nothing written:
    :func:`~shardpipe.write.started.take_for_update`). On
    a failure, shards left mid-update are rolled back before the error goes
    on (as :func:`~shardpipe.write.run.execute_together` does). A shard's
    writer encodes up to ``encoders`` inner chunks at once on idle cores.
    """
    store, keys = target.shards, JobKeys(target.key(""))
    metadata = existing.metadata
    shard_format = format_of(metadata)
    marker = take_for_update(
        target, keys, existing.version, since="the batch read it; make the batch again"
    )
    try:
        codec_target = WriteTarget(
            store=store,
            layout=layout_of(metadata),
            codec=ChunkCodec.from_metadata(metadata, write_empty_chunks=write_empty_chunks),
            shard_format=shard_format,
            staging=target.key(f"{STAGING_DIR}/{uuid.uuid4().hex}"),
            encoders=encoders,
        )
        update = UpdateTarget(
            write=codec_target,
            strategy=existing.strategy,
            threshold=DEFAULT_UNUSED_THRESHOLD,
            rewrite_fits=rewrite_fits,
            keys=keys,
            marker=marker,
        )
        try:
            reports = [
                in_heap_scope(
                    update_shard_from_regions,
                    update,
                    shard=shard,
                    key=target.key(shard_format.key(shard)),
                    fills=fills,
                    boxes=boxes,
                    data=data,
                )
                for shard, fills in groups.items()
            ]
        except BaseException as err:
            undo_failed(target, keys, err, marker, identity=None)
            raise
        return finish_write(codec_target, *reports)
    finally:
        release(store, keys, marker)
