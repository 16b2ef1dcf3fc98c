"""The levels of a pyramid as Dask arrays, each computed from the one before in one graph.

A level is its predecessor's blocks regrouped into whole windows of the
step (:func:`~shardpipe.core.pyramid.downsample_blocks`; Dask's ``rechunk``,
a no-op where they already are) and downsampled block by block
(``downsample-mean``, ``downsample-mode`` or ``downsample-nearest`` tasks
running :func:`~shardpipe.core.downsample.downsample_block`). Nothing is
read back from storage: the writes of every level and the downsampling
share the source's blocks, so a graph holding all the levels reads each
source block once (the write graphs must then keep those blocks as tasks of
their own: ``build_write_graph(..., shared_source=True)``).
"""

from __future__ import annotations

from collections.abc import Sequence

import dask.array as da

from shardpipe.core.downsample import downsample_block
from shardpipe.core.grid import ceildiv
from shardpipe.core.pyramid import aligned_sizes

__all__ = ["downsampled"]


def downsampled(
    level: da.Array,
    step: Sequence[int],
    method: str,
    blocks: Sequence[Sequence[int]] | None = None,
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
    blocks : sequence of sequence of int, optional
        The chunks ``level`` is regrouped into first; their edges must fall
        on multiples of ``step``. Default: blocks aligned near the current
        ones (:func:`~shardpipe.core.pyramid.aligned_sizes`).
    """
    full = (*step, *(1,) * (level.ndim - len(step)))
    if all(s == 1 for s in full):
        return level
    if blocks is None:
        blocks = tuple(
            aligned_sizes(sizes, s) if s > 1 else sizes
            for sizes, s in zip(level.chunks, full, strict=True)
        )
    source = level.rechunk(tuple(tuple(b) for b in blocks))
    out_chunks = tuple(
        tuple(ceildiv(c, s) for c in sizes) for sizes, s in zip(source.chunks, full, strict=True)
    )
    result: da.Array = source.map_blocks(
        downsample_block,
        full,
        method,
        chunks=out_chunks,
        dtype=source.dtype,
        token=f"downsample-{method}",
    )
    return result
