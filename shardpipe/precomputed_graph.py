"""The Dask graph of a precomputed write: scales downsampled in the graph, one task per shard.

Task names::

    downsample-mean / downsample-mode   a block of a scale from the scale before
    write-precomputed-shard             gather a shard's chunks from the blocks, publish it
    encode-precomputed-block            (scattered shards) encode the chunks inside a block
    pick-precomputed-chunks             (scattered shards) a block's share for one shard
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
import math
from collections.abc import Sequence

import dask.array as da
import numpy as np
from dask.delayed import Delayed, delayed

from shardpipe.core.downsample import downsample_block
from shardpipe.core.grid import Box
from shardpipe.core.morton import low_bits_box
from shardpipe.core.precomputed_plan import ScaleGrid, box_bits, largest_shard_chunks, shards_of
from shardpipe.errors import MemoryBudgetError
from shardpipe.formats.precomputed import PrecomputedSharding
from shardpipe.precomputed_tasks import (
    PrecomputedTarget,
    begin_shard,
    encode_block_chunks,
    for_shard,
    stamp_shard,
    write_gathered_shard,
    write_part,
    write_shard,
)
from shardpipe.storage.resolve import ResolvedStore


def part_bits(
    grid: ScaleGrid,
    spec: PrecomputedSharding,
    per_chunk: int,
    budget: int,
    factor: tuple[int, ...],
    target: ResolvedStore,
) -> int | None:
    """Low id bits of one part when a scale's shards do not fit a task, else None.

    ``per_chunk`` is what a task holds per chunk. A shard that is a box is
    cut into parts that are aligned boxes of ``2**bits`` chunks (contiguous,
    increasing id ranges), the largest that fit.

    Raises
    ------
    shardpipe.errors.MemoryBudgetError
        When a shard does not fit and cannot be written in parts (scattered
        chunks, a store without parts), or a single chunk does not fit.
    """
    projected = per_chunk * largest_shard_chunks(grid, spec)
    if projected <= budget:
        return None
    task = f"write-precomputed-shard (scale {factor})"
    low = box_bits(grid, spec)
    if low is None or not target.shards.supports_parts:
        why = (
            "its chunks are scattered (not an identity-hashed box)"
            if low is None
            else f"{type(target.shards).__name__} cannot write a file in parts"
        )
        raise MemoryBudgetError(
            task,
            projected,
            budget,
            f"a shard's task holds its chunks about three times over, and this shard cannot "
            f"be written in parts: {why}; raise max_mem, or use fewer preshift and "
            "minishard bits (smaller shards)",
        )
    for bits in range(low - 1, -1, -1):
        if per_chunk * math.prod(low_bits_box(grid.grid, bits)) <= budget:
            return bits
    raise MemoryBudgetError(
        task, per_chunk, budget, "a single chunk does not fit; raise max_mem or use smaller chunks"
    )


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

    if parts is None and box_bits(grid, ship.sharding) is None:
        return _gathered_tasks(ship, token, blocks, bounds)
    tasks = []
    for n, shard in enumerate(shards_of(grid, ship.sharding)):
        if parts is None:
            regions = (
                [shard.box] if shard.box is not None else [grid.chunk_box(c) for c in shard.coords]
            )
            feed, boxes = fed_by(regions)
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
        groups = shard.ids >> np.uint64(parts)  # ids are increasing: so are the groups
        edges = np.flatnonzero(np.diff(groups)) + 1
        written = []
        pieces = list(zip(np.split(shard.ids, edges), np.split(shard.coords, edges), strict=True))
        for k, (ids, coords) in enumerate(pieces):
            feed, boxes = fed_by([grid.chunk_box(c) for c in coords])
            written.append(
                delayed(write_part, pure=False)(
                    ship,
                    handle,
                    *feed,
                    number=k,
                    ids=tuple(int(i) for i in ids),
                    coords=tuple(tuple(int(v) for v in c) for c in coords),
                    block_boxes=boxes,
                    dask_key_name=f"write-precomputed-part-{token}-{n}-{k}",
                )
            )
        tasks.append(
            delayed(stamp_shard, pure=False)(
                ship, handle, *written, dask_key_name=f"stamp-precomputed-shard-{token}-{n}"
            )
        )
    return tasks


def _gathered_tasks(
    ship: PrecomputedTarget, token: str, blocks: np.ndarray, bounds: Sequence[np.ndarray]
) -> list[Delayed]:
    """Scattered shards (murmurhash): chunks encoded where their blocks are, grouped by shard.

    One ``encode-precomputed-block`` task per source block encodes the chunks
    wholly inside it and cuts the pieces of the others; a small
    ``pick-precomputed-chunks`` task per block and shard it feeds takes that
    shard's share; one ``write-precomputed-shard`` task per shard assembles
    the straddling chunks from their pieces and publishes the file. Only
    encoded chunks and the pieces of straddling chunks travel.
    """
    grid = ship.scale
    shards = list(shards_of(grid, ship.sharding))
    feeds: dict[tuple[int, ...], list[tuple[int, int, tuple[int, ...]]]] = {}
    for shard in shards:
        for chunk_id, coords in zip(shard.ids.tolist(), shard.coords, strict=True):
            c = tuple(int(v) for v in coords)
            for b in _overlapping(bounds, [grid.chunk_box(c)]):
                feeds.setdefault(b, []).append((int(chunk_id), shard.shard, c))
    picks: dict[int, list[Delayed]] = {}
    for n, (b, chunks) in enumerate(sorted(feeds.items())):
        box = tuple((int(bounds[d][i]), int(bounds[d][i + 1])) for d, i in enumerate(b))
        held = delayed(encode_block_chunks, pure=False)(
            ship,
            blocks[(*b, 0)],
            block_box=box,
            chunks=tuple(chunks),
            dask_key_name=f"encode-precomputed-block-{token}-{n}",
        )
        for number in sorted({shard for _, shard, _ in chunks}):
            picks.setdefault(number, []).append(
                delayed(for_shard, pure=True)(
                    held, number, dask_key_name=f"pick-precomputed-chunks-{token}-{n}-{number}"
                )
            )
    return [
        delayed(write_gathered_shard, pure=False)(
            ship,
            *picks.get(shard.shard, []),
            shard=shard,
            dask_key_name=f"write-precomputed-shard-{token}-{n}",
        )
        for n, shard in enumerate(shards)
    ]


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


def downsampled(level: da.Array, step: tuple[int, ...], method: str) -> da.Array:
    """``level`` downsampled by ``step`` (blocks first aligned to multiples of it)."""
    if all(s == 1 for s in step):
        return level
    spatial = zip(level.chunks[:3], step, strict=True)
    source = level.rechunk((*(_aligned(sizes, s) for sizes, s in spatial), level.chunks[3]))
    smaller = zip(source.chunks[:3], step, strict=True)
    out_chunks = (*(tuple(-(-c // s) for c in sizes) for sizes, s in smaller), source.chunks[3])
    result: da.Array = source.map_blocks(
        downsample_block,
        step,
        method,
        chunks=out_chunks,
        dtype=source.dtype,
        token=f"downsample-{method}",
    )
    return result


def _aligned(sizes: tuple[int, ...], step: int) -> tuple[int, ...]:
    """Block sizes near ``sizes`` whose boundaries are multiples of ``step`` (the last one free)."""
    total = sum(sizes)
    target = max(step, (max(sizes) // step) * step)
    out = [target] * (total // target)
    if total % target:
        out.append(total % target)
    return tuple(out)
