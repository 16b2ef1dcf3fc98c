"""Shards that plan alike: classes of shards whose plans add up to the same figures.

A plan's totals (tasks per kind, parts, inner chunks, projected memory:
:mod:`shardpipe.core.plan_totals`) see of a shard only its coverage counts
and, for each part, how many inner chunks it holds and how large the Dask
blocks feeding it are. Parts are boxes, the product of an interval of
inner chunks along each dimension, and the blocks feeding a part are the
product of the blocks touching each interval. So what the totals see of a
shard is a product, over the dimensions, of one-dimensional *profiles*: how
many inner chunks the array holds, the region touches and covers fully along
that dimension, and per interval of parts its inner chunks and the sizes of
the blocks touching it.

The shards a region touches therefore fall into classes, the product of the
distinct profiles along each dimension, and every total of the plan is a sum
or a maximum over classes weighted by their sizes::

    dimension 0, shard index   0    1    2    3    4    5
    profile                    A    B    A    B    A    C   (blocks of 1.5 shards)
    dimension 1                D    D    D    E             (edge shard E)
    classes                    AD x 6, AE x 3, BD x 6, BE x 2, CD x 3, CE x 1

A profile ignores where block edges fall inside a part, only how many
blocks of which sizes feed it, so regular Dask blocks give a handful of
profiles per dimension (interior, edges, a few ways of straddling) however
misaligned they are. Blocks of many different sizes can make every profile
distinct; the classes are then the shards themselves, and the cost is what
planning each shard costs.
"""

from __future__ import annotations

import itertools
import math
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass

from shardpipe.core.grid import Coords, Shape, ceildiv
from shardpipe.core.region import Placement

Profile = tuple[int, int, int, tuple[tuple[int, tuple[int, ...]], ...]]
"""``(chunks in array, chunks touched, chunks fully covered, parts)``, along one dimension.

``parts`` holds, per interval of parts in order, its number of inner chunks
and the sizes of the blocks touching it, sorted.
"""


def profile(placement: Placement, part_chunks: Shape, dim: int, index: int) -> Profile:
    """Return the profile of shard index ``index`` along dimension ``dim``.

    Parameters
    ----------
    placement : Placement
        The source's blocks placed in the array.
    part_chunks : tuple of int
        Shape of a (non-edge) part, in inner chunks.
    dim : int
        The dimension.
    index : int
        A shard index along ``dim`` that the region touches.
    """
    layout = placement.layout
    size, chunk = layout.shard_shape[dim], layout.chunk_shape[dim]
    base = index * size
    extent = min(size, layout.shape[dim] - base)
    r0, r1 = placement.region[dim]
    in_array = ceildiv(extent, chunk)
    first = max(0, (r0 - base) // chunk)
    last = min(in_array, ceildiv(r1 - base, chunk))
    full_first = max(first, ceildiv(r0 - base, chunk))
    full_last = last if min(last * chunk, extent) <= r1 - base else last - 1
    bounds, offset = placement.blocks.bounds[dim], placement.offset[dim]
    parts = []
    for start in range(first, last, part_chunks[dim]):
        stop = min(start + part_chunks[dim], last)
        lo = max(base + start * chunk, r0) - offset
        hi = min(base + stop * chunk, base + extent, r1) - offset
        j0, j1 = bisect_right(bounds, lo) - 1, bisect_right(bounds, hi - 1) - 1
        sizes = sorted(bounds[j + 1] - bounds[j] for j in range(j0, j1 + 1))
        parts.append((stop - start, tuple(s for s in sizes if s)))
    return in_array, max(0, last - first), max(0, full_last - full_first), tuple(parts)


@dataclass(frozen=True)
class DimensionClasses:
    """The distinct profiles along one dimension and the shard indices showing each.

    Parameters
    ----------
    representatives : tuple of int
        For each distinct profile, the first shard index that has it.
    counts : tuple of int
        For each distinct profile, how many shard indices have it.
    """

    representatives: tuple[int, ...]
    counts: tuple[int, ...]


def dimension_classes(placement: Placement, part_chunks: Shape, dim: int) -> DimensionClasses:
    """Group the shard indices the region touches along ``dim`` by profile."""
    first_index: dict[Profile, int] = {}
    counts: dict[Profile, int] = {}
    for index in placement.shard_ranges[dim]:
        key = profile(placement, part_chunks, dim, index)
        first_index.setdefault(key, index)
        counts[key] = counts.get(key, 0) + 1
    return DimensionClasses(tuple(first_index.values()), tuple(counts.values()))


@dataclass(frozen=True)
class ShardClass:
    """Shards whose plans add up to the same totals.

    Parameters
    ----------
    representative : Coords
        Grid coordinates of one shard of the class (the first in C order).
    count : int
        Number of shards in the class.
    """

    representative: Coords
    count: int


def shard_classes(placement: Placement, part_chunks: Shape) -> Iterator[ShardClass]:
    """Iterate over the classes of the shards the region touches.

    The counts add up to ``placement.n_shards``; the representatives are
    distinct shards the region touches.
    """
    ndim = placement.layout.ndim
    per_dim = [dimension_classes(placement, part_chunks, d) for d in range(ndim)]
    for combo in itertools.product(*(range(len(c.counts)) for c in per_dim)):
        yield ShardClass(
            tuple(c.representatives[k] for c, k in zip(per_dim, combo, strict=True)),
            math.prod(c.counts[k] for c, k in zip(per_dim, combo, strict=True)),
        )


def n_shard_classes(placement: Placement, part_chunks: Shape) -> int:
    """Number of classes :func:`shard_classes` yields."""
    ndim = placement.layout.ndim
    return math.prod(len(dimension_classes(placement, part_chunks, d).counts) for d in range(ndim))
