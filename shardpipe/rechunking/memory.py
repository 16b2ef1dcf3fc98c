"""What a one-pass rechunk holds between tasks, and where an automatic second pass keeps its copy.

``max_mem`` bounds each task by the memory model. When the blocks a rechunk
can afford are thinner than the target's inner chunks (slabs into cubes),
one pass also holds what no single task does: every block feeding a part
stays in memory until the part's last block is read. The graph reads blocks
in order and at most a few ahead of the written parts
(:mod:`shardpipe.engine.read_gates`), so what waits is, per wave of shards, the
blocks of the parts being gathered plus the blocks read ahead, and a few
waves run at once (:mod:`shardpipe.engine.streaming`). :func:`one_pass_hold`
counts that from the plan.

When it would exceed :data:`~shardpipe.core.memory.HOLD_SHARE` of ``max_mem``,
:func:`shardpipe.plan_rechunk` goes in two passes through an intermediate copy,
which it places beside the target (:func:`automatic_temp_store`) unless
``temp_store`` names a place.
"""

from __future__ import annotations

import math
import os
import posixpath
import uuid
from bisect import bisect_right

import numpy as np

from shardpipe.engine.read_gates import read_ahead
from shardpipe.engine.streaming import WAVES_PER_BATCH
from shardpipe.storage.resolve import ResolvedStore
from shardpipe.stored.locations import store_location
from shardpipe.write.job import ShardedWrite


def one_pass_hold(write: ShardedWrite, threads: int | None = None) -> int:
    """Bytes a one-pass write holds between tasks while it gathers parts from several blocks.

    Per wave: the blocks (cut to the wave's box) that the parts being
    gathered need, plus those read ahead; times the waves that run at once
    (two batches of about :data:`~shardpipe.engine.streaming.WAVES_PER_BATCH`).
    0 when every part is fed by one block.

    Parameters
    ----------
    write : ShardedWrite
        The one-pass write job.
    threads : int, optional
        Worker threads of a ``distributed`` cluster (None: Dask's local schedulers).
    """
    plan = write.plan
    if plan.n_shards == 0:
        return 0
    schedule = write.wave_schedule(threads)
    wave = schedule.wave(0)
    layout, placement, bounds = plan.layout, plan.placement, plan.blocks.bounds
    lows, highs, window = [], [], []
    for d, shards in enumerate(wave.ranges):
        size, (r0, r1) = layout.shard_shape[d], placement.region[d]
        lo = max(shards.start * size, r0) - placement.offset[d]
        hi = min(shards.stop * size, r1) - placement.offset[d]
        lows.append(bisect_right(bounds[d], lo) - 1)
        highs.append(bisect_right(bounds[d], hi - 1))
        window.append(min(max(plan.blocks.chunks[d]), hi - lo))
    grid = tuple(h - lo for h, lo in zip(highs, lows, strict=True))
    span = 1
    for coords in _first_shards(wave.ranges):
        for part in plan.shard(coords).parts:
            if len(part.blocks) < 2:
                continue
            order = [
                int(
                    np.ravel_multi_index(
                        tuple(b - lo for b, lo in zip(block, lows, strict=True)), grid
                    )
                )
                for block in part.blocks
            ]
            span = max(span, max(order) - min(order) + 1)
    if span == 1:
        return 0
    in_flight = min(schedule.n_waves, 2 * WAVES_PER_BATCH)
    block = math.prod(window) * plan.itemsize
    return in_flight * (span + read_ahead(threads)) * block


def _first_shards(ranges: tuple[range, ...]) -> list[tuple[int, ...]]:
    """The wave's first shard and its last (edges differ), enough to see how parts gather."""
    first = tuple(r.start for r in ranges)
    last = tuple(r.stop - 1 for r in ranges)
    return [first] if first == last else [first, last]


def copy_is_local(place: str | os.PathLike[str]) -> bool:
    """Whether an intermediate copy at ``place`` is on a local disk (a path, or a ``file://`` URL).

    A local copy is kept raw (:mod:`shardpipe.rechunking.intermediate`).
    """
    text = os.fspath(place)
    return "://" not in text or text.startswith("file://")


def automatic_temp_store(target: ResolvedStore) -> str | None:
    """Where an automatic two-pass rechunk puts its copy: beside the target, hidden.

    ``.<name>.intermediate-<id>.zarr`` in the folder (or prefix) holding the
    target, for a local or fsspec target; None for other stores (an
    Icechunk session, a memory store), which then stay in one pass. A URL keeps the
    scheme the target was written with (``az://`` rather than adlfs's ``abfs://``).
    """
    where = store_location(target.zarr_store, target.path)
    if where is None or where.scheme == "memory" or not where.path.strip("/"):
        return None
    parent, name = posixpath.split(where.path.rstrip("/"))
    hidden = f".{name}.intermediate-{uuid.uuid4().hex[:8]}.zarr"
    if where.scheme == "file":
        return os.path.join("/" + parent, hidden)
    return f"{target.scheme or where.scheme}://{posixpath.join(parent, hidden)}"
