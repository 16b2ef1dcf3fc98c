"""Downsampling a region of a level from the blocks that hold it, in one step.

A pyramid level is computed region by region (a region: a box of the level
before whose edges fall on whole windows; for a new image, one shard). The
task computing a region is handed the pieces of the level's blocks that
the region holds, with their places in it, and returns the downsampled
region: there is no separate regrouping (``rechunk``) step, whose joined
copies would each be held until their downsampling ran.

Two ways, chosen by where the pieces start and end:

* *piecewise*: every piece starts on a window's edge and ends on one (or
  at the level's far end), so each window lies inside one piece: each
  piece is downsampled on its own, straight from the block it is a view
  of, into its place in the output. Nothing of the region is copied.
* *joined*: a window straddles two pieces: the pieces are copied into one
  region first, then downsampled.

:func:`~shardpipe.core.pyramid.region_nbytes` is the memory such a task
holds, which a plan keeps within its budget.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from shardpipe.core.downsample import downsample_block, full_factor
from shardpipe.core.grid import Box, ceildiv

__all__ = ["downsample_region", "is_piecewise", "straddles"]


def is_piecewise(places: Sequence[Box], factor: Sequence[int], region: Sequence[int]) -> bool:
    """Whether each window of the region lies inside one piece.

    Parameters
    ----------
    places : sequence of Box
        Each piece's box inside the region.
    factor : sequence of int
        Factor per leading axis.
    region : sequence of int
        The region's shape; its far end is a window's edge or the level's end.
    """
    full = full_factor(len(region), factor)
    for place in places:
        for (a, b), f, n in zip(place, full, region, strict=True):
            if a % f or (b % f and b != n):
                return False
    return True


def straddles(chunks: Sequence[Sequence[int]], step: Sequence[int]) -> bool:
    """Whether a window of ``step`` straddles two of the blocks ``chunks`` (sizes per axis).

    True when a block edge inside the level is off the windows' edges along
    a downsampled axis: the region around it must be joined before it is
    downsampled (a region's edges are windows' edges, so every such block
    edge falls inside a region).
    """
    full = full_factor(len(chunks), step)
    for sizes, f in zip(chunks, full, strict=True):
        edge = 0
        for size in list(sizes)[:-1]:
            edge += size
            if edge % f:
                return True
    return False


def downsample_region(
    *pieces: np.ndarray,
    places: Sequence[Box],
    region: Sequence[int],
    factor: Sequence[int],
    method: str,
) -> np.ndarray:
    """The region made of ``pieces`` (at ``places``) downsampled by ``factor`` with ``method``.

    Parameters
    ----------
    *pieces : numpy.ndarray
        The region's contents, piece by piece (views of blocks).
    places : sequence of Box
        Each piece's box inside the region; together they tile it.
    region : sequence of int
        The region's shape.
    factor : sequence of int
        Factor per leading axis.
    method : str
        ``mean``, ``mode`` or ``nearest``.
    """
    full = full_factor(len(region), factor)
    if len(pieces) == 1:
        return downsample_block(pieces[0], full, method)
    if not is_piecewise(places, full, region):
        joined = np.empty(tuple(region), dtype=pieces[0].dtype)
        for piece, place in zip(pieces, places, strict=True):
            joined[tuple(slice(a, b) for a, b in place)] = piece
        return downsample_block(joined, full, method)
    out_shape = tuple(ceildiv(n, f) for n, f in zip(region, full, strict=True))
    out = np.empty(out_shape, dtype=pieces[0].dtype)
    for piece, place in zip(pieces, places, strict=True):
        into = tuple(slice(a // f, ceildiv(b, f)) for (a, b), f in zip(place, full, strict=True))
        out[into] = downsample_block(piece, full, method)
    return out
