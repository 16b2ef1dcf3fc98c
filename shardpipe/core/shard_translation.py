"""Shard plans by translation: plan one shard of each class, move that plan to the others.

Planning a shard (:meth:`~shardpipe.core.plan.WritePlan.shard`) walks its
parts, clips boxes and looks up the Dask blocks touching each; a wave of a
petabyte write plans thousands of shards, most of them alike. Along one
dimension, what a shard's plan sees is its *neighbourhood*: where the array
ends and where the region starts and stops, relative to the shard's start,
and the edges of the blocks touching it, relative to the shard's start too::

    dimension 0, blocks of half a shard   |-b0-|-b1-|-b2-|-b3-|-b4-|-b5-|
    shards                                |-- 0 ----|-- 1 ----|-- 2 ----|
    neighbourhood of shard 1: extent 8, region [0, 8), block edges 0, 4, 8
                                      the same as shards 0 and 2, blocks moved by 2

Every box of a plan (coverage, parts, regions) is a product of intervals
along the dimensions, and the blocks feeding a part are the product of the
blocks touching each interval. So two shards whose neighbourhoods are equal
along every dimension have the same plan up to a translation: regions move
by the shards' distance in elements, block coordinates by the distance
between the first blocks touching each. Interior shards of a regular grid
share one neighbourhood; the edges of the array, of the region and of a
misaligned block grid make a few more. :class:`TranslatedShards` plans the
first shard of each class it meets and moves that plan to the rest.

This is finer than :mod:`shardpipe.core.shard_classes`, whose classes only
promise equal totals: here the plans themselves are equal, up to where they lie.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable

from shardpipe.core.grid import Coords
from shardpipe.core.region import Placement
from shardpipe.core.shard_plan import PartPlan, ShardPlan

__all__ = ["MAX_TEMPLATES", "TranslatedShards", "neighbourhood"]

MAX_TEMPLATES = 4096
"""Most shard plans kept as templates: irregular blocks can make every shard a class."""

Neighbourhood = tuple[int, int, int, tuple[int, ...]]
"""``(extent, region start, region stop, block edges)`` along a dimension, from the shard start."""


def neighbourhood(placement: Placement, dim: int, index: int) -> tuple[Neighbourhood, int]:
    """What the plan of shard index ``index`` sees along ``dim``, and its first block there.

    Parameters
    ----------
    placement : Placement
        The source's blocks placed in the array.
    dim : int
        The dimension.
    index : int
        A shard index along ``dim`` that the region touches.

    Returns
    -------
    (tuple, int)
        The neighbourhood: the extent of the shard inside the array, the
        region clipped to it, and the edges of every block touching that
        (empty blocks included), all relative to the shard's first element;
        and the index of the first of those blocks.
    """
    layout = placement.layout
    size = layout.shard_shape[dim]
    base = index * size
    extent = min(size, layout.shape[dim] - base)
    r0, r1 = placement.region[dim]
    lo, hi = min(max(r0 - base, 0), extent), max(min(r1 - base, extent), 0)
    bounds, offset = placement.blocks.bounds[dim], placement.offset[dim]
    first = bisect_right(bounds, base + lo - offset) - 1
    last = bisect_right(bounds, base + hi - 1 - offset) - 1
    edges = tuple(bounds[j] + offset - base for j in range(first, last + 2))
    return (extent, lo, hi, edges), first


class TranslatedShards:
    """The plans of shards, each moved from the plan of the first shard of its class.

    Parameters
    ----------
    placement : Placement
        The source's blocks placed in the array.
    plan_shard : callable
        Plans one shard from scratch (:meth:`~shardpipe.core.plan.WritePlan.shard`).
    max_templates : int
        Most classes whose plan is kept; shards of further classes are
        planned from scratch.
    """

    def __init__(
        self,
        placement: Placement,
        plan_shard: Callable[[Coords], ShardPlan],
        max_templates: int = MAX_TEMPLATES,
    ) -> None:
        self._placement = placement
        self._plan_shard = plan_shard
        self._max_templates = max_templates
        self._shard_shape = placement.layout.shard_shape
        self._seen: list[dict[int, tuple[Neighbourhood, int]]] = [
            {} for _ in range(placement.layout.ndim)
        ]
        self._templates: dict[tuple[Neighbourhood, ...], tuple[ShardPlan, Coords]] = {}

    def _along(self, dim: int, index: int) -> tuple[Neighbourhood, int]:
        seen = self._seen[dim]
        found = seen.get(index)
        if found is None:
            found = seen[index] = neighbourhood(self._placement, dim, index)
        return found

    def shard(self, coords: Coords) -> ShardPlan:
        """The plan of the shard at ``coords`` (one the region touches)."""
        along = [self._along(d, i) for d, i in enumerate(coords)]
        cls = tuple(n for n, _ in along)
        known = self._templates.get(cls)
        if known is None:
            plan = self._plan_shard(coords)
            if len(self._templates) < self._max_templates:
                firsts = tuple(first for _, first in along)
                self._templates[cls] = (plan, firsts)
            return plan
        template, template_firsts = known
        if template.coords == coords:
            return template
        shift = tuple(
            (i - t) * s for i, t, s in zip(coords, template.coords, self._shard_shape, strict=True)
        )
        moves = tuple(first - t for (_, first), t in zip(along, template_firsts, strict=True))
        return ShardPlan(coords, template.coverage, _moved(template.parts, shift, moves))


def _moved(parts: tuple[PartPlan, ...], shift: Coords, moves: Coords) -> tuple[PartPlan, ...]:
    """``parts`` with their regions moved by ``shift`` elements and blocks by ``moves``."""
    return tuple(
        PartPlan(
            p.number,
            p.chunks,
            tuple((a + s, b + s) for (a, b), s in zip(p.region, shift, strict=True)),
            tuple(tuple(j + m for j, m in zip(block, moves, strict=True)) for block in p.blocks),
            p.blocks_nbytes,
            p.gather_in_task,
        )
        for p in parts
    )
