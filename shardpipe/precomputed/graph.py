"""The Dask graph of a precomputed write: scales downsampled in the graph, one task per shard.

Task names::

    downsample-mean / downsample-mode   a block of a scale from the scale before
    write-precomputed-shard             gather a shard's chunks from the blocks, publish it
    encode-precomputed-block            (scattered shards) encode the chunks inside a block
    pick-precomputed-chunks             (scattered shards) a block's share for one shard
                                        (one part of it, when it is written in parts)
    begin-precomputed-shard             start a shard too large for one task (parts)
    write-precomputed-part              gather, encode and write one part of it
    stamp-precomputed-shard             its shard and minishard indexes; publish it
    write-done                          remove the staging area, add up the reports

Blocks are taken with ``to_delayed(optimize_graph=False)``, so every task
shares the source's keys: each source block is computed once for all
shards, parts and scales, and no rechunk copies the data on the way.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import dask.array as da
import numpy as np
from dask.delayed import Delayed, delayed

from shardpipe import advice
from shardpipe.core.grid import Box
from shardpipe.core.precomputed_plan import (
    ScaleGrid,
    ShardChunks,
    box_bits,
    largest_shard_chunks,
    shards_of,
)
from shardpipe.errors import MemoryBudgetError
from shardpipe.formats.precomputed import PrecomputedSharding
from shardpipe.precomputed.tasks import (
    PrecomputedTarget,
    begin_shard,
    encode_block_chunks,
    for_shard,
    stamp_shard,
    write_gathered_part,
    write_gathered_shard,
    write_part,
    write_shard,
)
from shardpipe.storage.resolve import ResolvedStore

PUBLISHING = ("write-precomputed-shard", "stamp-precomputed-shard")
"""Names of the tasks after which a shard file of a volume is complete (progress counts them)."""


def part_chunks(
    grid: ScaleGrid,
    spec: PrecomputedSharding,
    per_chunk: int,
    budget: int,
    factor: tuple[int, ...],
    target: ResolvedStore,
) -> int | None:
    """Most chunks of one part when a scale's shards do not fit a task, else None.

    ``per_chunk`` is what a task holds per chunk. A shard too large is cut
    into runs of consecutive chunks in slot (id) order; the run length is a
    power of two, so that the runs of a whole box are aligned boxes.

    Raises
    ------
    shardpipe.errors.MemoryBudgetError
        When a shard does not fit and the store cannot write a file in
        parts, or a single chunk does not fit.
    """
    task = f"write-precomputed-shard (scale {factor})"
    low = box_bits(grid, spec)
    largest = largest_shard_chunks(grid, spec)  # scattered shards: every chunk id hashed
    slots = largest if low is None else 1 << min(low, grid.id_bits)
    index = 40 * slots  # the stamp's index by slot (16 B) and minishard entries (24 B)
    if index > budget:
        raise MemoryBudgetError(
            task,
            index,
            budget,
            f"a shard spans {slots:,} chunk ids, whose index alone a task cannot hold; use "
            "fewer preshift and minishard bits (smaller shards)",
        )
    projected = per_chunk * largest
    if projected <= budget:
        return None
    if not target.shards.supports_parts:
        raise MemoryBudgetError(
            task,
            projected,
            budget,
            f"a shard's task holds its chunks about three times over, and "
            f"{type(target.shards).__name__} cannot write a file in parts; raise "
            f"{advice.name('max_mem')}, "
            "or use fewer preshift and minishard bits (smaller shards)",
        )
    most = budget // per_chunk
    if most < 1:
        raise MemoryBudgetError(
            task,
            per_chunk,
            budget,
            f"a single chunk does not fit; raise {advice.name('max_mem')} or use smaller chunks",
        )
    return 1 << (most.bit_length() - 1)


def _runs(n_chunks: int, parts: int | None) -> list[tuple[int, int]]:
    """``[start, stop)`` of each part's run of a shard's ``n_chunks`` chunks (one: no parts)."""
    step = n_chunks if parts is None else parts
    return [(a, min(a + step, n_chunks)) for a in range(0, n_chunks, max(step, 1))]


def shard_tasks(
    level: da.Array, ship: PrecomputedTarget, token: str, parts: int | None, staging: str
) -> list[Delayed]:
    """One publishing task per shard of a scale (a stamp after its parts, with ``parts``)."""
    blocks = level.to_delayed(optimize_graph=False)
    bounds = [np.cumsum((0, *sizes)) for sizes in level.chunks[:3]]
    grid = ship.scale

    def fed_by(regions: Sequence[tuple[slice, ...]]) -> tuple[list[Delayed], tuple[Box, ...]]:
        chosen = _overlapping(bounds, regions)
        boxes = tuple(
            tuple((int(bounds[d][i]), int(bounds[d][i + 1])) for d, i in enumerate(b))
            for b in chosen
        )
        return [blocks[(*b, 0)] for b in chosen], boxes

    if box_bits(grid, ship.sharding) is None:
        return _gathered_tasks(ship, token, blocks, bounds, parts, staging)
    tasks = []
    for n, shard in enumerate(shards_of(grid, ship.sharding)):
        if parts is None:
            assert shard.box is not None
            feed, boxes = fed_by([shard.box])
            tasks.append(
                delayed(write_shard, pure=False)(
                    ship,
                    *feed,
                    shard=shard,
                    block_boxes=boxes,
                    dask_key_name=f"write-precomputed-shard-{token}-{n}",
                )
            )
            continue
        handle = delayed(begin_shard, pure=False)(
            ship,
            shard=shard.shard,
            staging=staging,
            dask_key_name=f"begin-precomputed-shard-{token}-{n}",
        )
        slots, _ = ship.shard_format(shard).slots((shard.shard,), shard.ids)
        written = []
        for k, (a, b) in enumerate(_runs(len(shard.ids), parts)):
            feed, boxes = fed_by([grid.chunk_box(c) for c in shard.coords[a:b]])
            written.append(
                delayed(write_part, pure=False)(
                    ship,
                    handle,
                    *feed,
                    number=k,
                    slots=tuple(slots[a:b].tolist()),
                    coords=tuple(tuple(int(v) for v in c) for c in shard.coords[a:b]),
                    block_boxes=boxes,
                    dask_key_name=f"write-precomputed-part-{token}-{n}-{k}",
                )
            )
        tasks.append(_stamp(ship, handle, written, shard, f"{token}-{n}"))
    return tasks


def _stamp(
    ship: PrecomputedTarget, handle: Delayed, written: list[Delayed], shard: ShardChunks, name: str
) -> Delayed:
    """The task stamping and publishing a shard written in parts."""
    task: Delayed = delayed(stamp_shard, pure=False)(
        ship, handle, *written, shard=shard, dask_key_name=f"stamp-precomputed-shard-{name}"
    )
    return task


def _gathered_tasks(
    ship: PrecomputedTarget,
    token: str,
    blocks: np.ndarray,
    bounds: Sequence[np.ndarray],
    parts: int | None,
    staging: str,
) -> list[Delayed]:
    """Scattered shards (murmurhash): chunks encoded where their blocks are, grouped by shard.

    One ``encode-precomputed-block`` task per source block encodes the chunks
    wholly inside it and cuts the pieces of the others; a small
    ``pick-precomputed-chunks`` task per block and shard (per part of a
    shard, with ``parts``) takes that shard's share; one
    ``write-precomputed-shard`` task per shard (``write-precomputed-part``
    per part, then ``stamp-precomputed-shard``) assembles the straddling
    chunks from their pieces and writes the file. Only encoded chunks and
    the pieces of straddling chunks travel.
    """
    grid = ship.scale
    shards = list(shards_of(grid, ship.sharding))
    runs = [_runs(len(shard.ids), parts) for shard in shards]
    feeds: dict[tuple[int, ...], list[tuple[int, int, tuple[int, ...]]]] = {}
    fed: dict[tuple[int, ...], set[tuple[int, int]]] = {}  # block: (shard index, run) it feeds
    for s, shard in enumerate(shards):
        for k, (a, b) in enumerate(runs[s]):
            for chunk_id, coords in zip(shard.ids[a:b].tolist(), shard.coords[a:b], strict=True):
                c = tuple(int(v) for v in coords)
                for block in _overlapping(bounds, [grid.chunk_box(c)]):
                    feeds.setdefault(block, []).append((int(chunk_id), shard.shard, c))
                    fed.setdefault(block, set()).add((s, k))
    picks: dict[tuple[int, int], list[Delayed]] = {}
    for n, (block, chunks) in enumerate(sorted(feeds.items())):
        box = tuple((int(bounds[d][i]), int(bounds[d][i + 1])) for d, i in enumerate(block))
        held = delayed(encode_block_chunks, pure=False)(
            ship,
            blocks[(*block, 0)],
            block_box=box,
            chunks=tuple(chunks),
            dask_key_name=f"encode-precomputed-block-{token}-{n}",
        )
        for s, k in sorted(fed[block]):
            a, b = runs[s][k]
            ids = shards[s].ids
            picks.setdefault((s, k), []).append(
                delayed(for_shard, pure=True)(
                    held,
                    shards[s].shard,
                    int(ids[a]),
                    int(ids[b - 1]),
                    dask_key_name=f"pick-precomputed-chunks-{token}-{n}-{s}-{k}",
                )
            )
    tasks = []
    for s, shard in enumerate(shards):
        if parts is None:
            tasks.append(
                delayed(write_gathered_shard, pure=False)(
                    ship,
                    *picks.get((s, 0), []),
                    shard=shard,
                    dask_key_name=f"write-precomputed-shard-{token}-{s}",
                )
            )
            continue
        handle = delayed(begin_shard, pure=False)(
            ship,
            shard=shard.shard,
            staging=staging,
            dask_key_name=f"begin-precomputed-shard-{token}-{s}",
        )
        written = [
            delayed(write_gathered_part, pure=False)(
                ship,
                handle,
                *picks.get((s, k), []),
                number=k,
                chunks=ShardChunks(shard.shard, shard.ids[a:b], shard.coords[a:b], None),
                first_slot=a,
                dask_key_name=f"write-precomputed-part-{token}-{s}-{k}",
            )
            for k, (a, b) in enumerate(runs[s])
        ]
        tasks.append(_stamp(ship, handle, written, shard, f"{token}-{s}"))
    return tasks


def _overlapping(
    bounds: Sequence[np.ndarray], regions: Sequence[tuple[slice, ...]]
) -> list[tuple[int, ...]]:
    """Block coordinates of the blocks (edges ``bounds``) that overlap any of ``regions``."""
    index: set[tuple[int, ...]] = set()
    for region in regions:
        ranges = [
            range(
                int(np.searchsorted(edges, r.start, side="right")) - 1,
                int(np.searchsorted(edges, r.stop, side="left")),
            )
            for r, edges in zip(region, bounds, strict=True)
        ]
        index.update(itertools.product(*ranges))
    return sorted(index)
