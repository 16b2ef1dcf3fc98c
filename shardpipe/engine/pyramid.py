"""The levels of a pyramid as Dask arrays, each computed from the one before in one graph.

A level is cut into *regions* of the level before (boxes whose edges fall
on whole windows of the step: for a new image, the shards of the level
before, so that each region's result is one aligned block of the next
level's writes). One ``downsample-mean`` (``-mode``, ``-nearest``) task per
region takes the pieces of the blocks it overlaps and downsamples them
(:func:`~shardpipe.core.downsample_region.downsample_region`): piece by
piece where the blocks' edges fall on windows' edges, else after joining
them. There is no regrouping step (Dask's ``rechunk``) whose joined blocks
would each be held until their downsampling ran.

Nothing is read back from storage: the writes of every level and the
downsampling share the source's blocks, so a graph holding all the levels
reads each source block once (the write graphs must then keep those blocks
as tasks of their own: ``build_write_graph(..., shared_source=True)``).
"""

from __future__ import annotations

import itertools
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from functools import partial
from typing import Any, cast

import dask.array as da
import numpy as np
from dask.base import tokenize
from dask.highlevelgraph import HighLevelGraph

from shardpipe.core.downsample_region import downsample_region
from shardpipe.core.grid import Box, ceildiv
from shardpipe.core.pyramid import aligned_sizes
from shardpipe.engine.heap import in_heap_scope
from shardpipe.internals.dask_task_spec import Task, TaskRef

__all__ = ["downsampled"]


def _bounds(sizes: Sequence[int]) -> list[int]:
    return [0, *itertools.accumulate(sizes)]


def _overlaps(bounds: Sequence[int], start: int, stop: int) -> range:
    """Indices of the blocks (edges ``bounds``) that overlap ``[start, stop)``."""
    return range(bisect_right(bounds, start) - 1, bisect_left(bounds, stop))


def _pieces(
    level_bounds: Sequence[Sequence[int]],
    region_bounds: Sequence[Sequence[int]],
    index: Sequence[int],
) -> tuple[Box, list[tuple[tuple[int, ...], Box, Box]]]:
    """Region ``index``'s box and, per block it overlaps: the block, the box in it, the place.

    ``level_bounds`` and ``region_bounds`` are the edges of the level's
    blocks and of the regions, per axis.
    """
    box = tuple((rb[i], rb[i + 1]) for rb, i in zip(region_bounds, index, strict=True))
    pieces = []
    for block in itertools.product(
        *(_overlaps(lb, a, b) for lb, (a, b) in zip(level_bounds, box, strict=True))
    ):
        inside, place = [], []
        for lb, j, (a, b) in zip(level_bounds, block, box, strict=True):
            lo, hi = max(a, lb[j]), min(b, lb[j + 1])
            inside.append((lo - lb[j], hi - lb[j]))
            place.append((lo - a, hi - a))
        pieces.append((tuple(block), tuple(inside), tuple(place)))
    return box, pieces


def downsampled(
    level: da.Array,
    step: Sequence[int],
    method: str,
    regions: Sequence[Sequence[int]] | None = None,
) -> da.Array:
    """``level`` downsampled by ``step`` (one entry per leading axis) with ``method``.

    Parameters
    ----------
    level : dask.array.Array
        The level before.
    step : sequence of int
        Factor per leading axis (axes past it are kept).
    method : str
        ``mean``, ``mode`` or ``nearest`` (:mod:`shardpipe.core.downsample`).
    regions : sequence of sequence of int, optional
        The sizes of the regions of ``level`` downsampled by one task each,
        per axis; their edges must fall on multiples of ``step``. The
        result's blocks are the regions downsampled. Default: regions
        aligned near ``level``'s blocks
        (:func:`~shardpipe.core.pyramid.aligned_sizes`).
    """
    full = (*step, *(1,) * (level.ndim - len(step)))
    if all(s == 1 for s in full):
        return level
    if regions is None:
        regions = tuple(
            aligned_sizes(sizes, s) if s > 1 else sizes
            for sizes, s in zip(level.chunks, full, strict=True)
        )
    regions = tuple(tuple(int(n) for n in r) for r in regions)
    out_chunks = tuple(
        tuple(ceildiv(c, s) for c in sizes) for sizes, s in zip(regions, full, strict=True)
    )
    name = f"downsample-{method}-{tokenize(level.name, full, method, regions)}"
    dsk: dict[Any, Task] = {}
    level_bounds = [_bounds(c) for c in level.chunks]
    region_bounds = [_bounds(r) for r in regions]
    for index in itertools.product(*(range(len(r)) for r in regions)):
        box, pieces = _pieces(level_bounds, region_bounds, index)
        refs = []
        for block, inside, _ in pieces:
            cut = tuple(slice(a, b) for a, b in inside)
            refs.append(Task(None, _cut, TaskRef((level.name, *block)), cut))
        func = partial(
            in_heap_scope,
            downsample_region,
            places=tuple(p for _, _, p in pieces),
            region=tuple(b - a for a, b in box),
            factor=full,
            method=method,
        )
        key = (name, *index)
        dsk[key] = Task(key, func, *refs)
    graph = HighLevelGraph.from_collections(name, dsk, dependencies=[cast(Any, level)])
    meta = np.empty((0,) * level.ndim, dtype=level.dtype)
    return da.Array(graph, name, out_chunks, meta=meta)


def _cut(block: np.ndarray, index: tuple[slice, ...]) -> np.ndarray:
    """A view of the part of ``block`` a region holds."""
    view: np.ndarray = block[index]
    return view
