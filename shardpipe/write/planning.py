"""A write's plan, checked against the store it writes to.

The core plans a write (:func:`~shardpipe.core.plan.plan_write`) from the
shard grid, the source's blocks and a memory model; here the model is built
from the inner chunks' codecs and the store's abilities
(:func:`memory_model`), and the plan is checked against what the store can
do (:func:`checked_plan`): how many parts a shard may have, the least size
of a part, whether it writes shards in parts at all.
"""

from __future__ import annotations

import math

from shardpipe import advice
from shardpipe.codec.chunk_codec import ChunkCodec
from shardpipe.core.grid import Shape
from shardpipe.core.memory import MemoryModel
from shardpipe.core.plan import WritePlan, plan_write
from shardpipe.core.region import Placement
from shardpipe.errors import InvalidArgumentError, MemoryBudgetError, PlanError
from shardpipe.internals.zarr_core import ArrayV3Metadata
from shardpipe.storage.base import ShardStore
from shardpipe.storage.resolve import ResolvedStore
from shardpipe.stored.metadata import format_of


def memory_model(
    codec: ChunkCodec, chunk_shape: Shape, store: ShardStore, *, undo: bool = False
) -> MemoryModel:
    """The memory model of tasks writing ``codec``'s inner chunks of ``chunk_shape`` to ``store``.

    ``undo``: the tasks keep the old bytes they overwrite (an update in place).
    """
    expansion, overhead = codec.expansion
    return MemoryModel(
        chunk_nbytes=math.prod(chunk_shape) * codec.dtype.itemsize,
        expansion=expansion,
        chunk_overhead=overhead,
        join_copies=store.abilities.joins_buffers,
        min_part_nbytes=store.min_part_size,
        undo=undo,
    )


def checked_plan(
    placement: Placement,
    codec: ChunkCodec,
    budget: int,
    target: ResolvedStore,
    metadata: ArrayV3Metadata,
    *,
    part_limit: int | None = None,
    undo: bool = False,
) -> WritePlan:
    """The plan of writing ``placement`` into ``target`` under ``budget`` (bytes).

    ``part_limit`` caps a part's raw bytes (a rechunk's block share of a
    shard); ``undo``: tasks keep the old bytes they overwrite.

    Raises
    ------
    MemoryBudgetError
        If no plan fits ``budget``.
    InvalidArgumentError
        Naming ``max_mem``, if the plan needs more parts than the store allows or
        parts the store cannot write.
    """
    store = target.shards
    itemsize = codec.dtype.itemsize
    model = memory_model(codec, placement.layout.chunk_shape, store, undo=undo)
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
            max_part_nbytes=(
                max(part_limit, store.min_part_size)
                if part_limit is not None and store.supports_parts
                else None
            ),
        )
    except MemoryBudgetError:
        raise
    except PlanError as err:
        raise InvalidArgumentError("max_mem", str(err), "See the message for the fix") from err
    if plan.max_parts_per_shard > 1 and not store.supports_parts:
        raise InvalidArgumentError(
            "max_mem",
            f"shards of {plan.layout.shard_shape} do not fit "
            f"{advice.valued('max_mem', str(budget))} and {type(store).__name__} cannot write "
            "a shard in parts",
            f"Raise {advice.name('max_mem')}, use smaller shards, or write to a local path or S3",
        )
    return plan
