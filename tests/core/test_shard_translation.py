"""Shard plans moved from a template (``shardpipe.core.shard_translation``) against brute force.

Every shard's plan made by translation must equal the plan made from
scratch by :meth:`~shardpipe.core.plan.WritePlan.shard`, in any order of
asking, for regular, misaligned and irregular blocks (empty ones too),
whole arrays and regions; and the templates must actually serve.
"""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardpipe.core.grid import BlockGrid, Coords, ShardLayout
from shardpipe.core.plan import ShardPlan, WritePlan, plan_write
from shardpipe.core.region import Placement
from shardpipe.core.shard_translation import TranslatedShards, neighbourhood
from tests.support.examples import scaled

from .test_plan import feasible_budget, problems

SETTINGS = settings(max_examples=scaled(80), deadline=None)


@st.composite
def sizes_along(draw: st.DrawFn, n: int, chunk: int) -> tuple[int, ...]:
    """Block sizes adding up to ``n``: regular (chunk-aligned or not), or irregular with empties."""
    kind = draw(st.sampled_from(["regular", "irregular"]))
    if kind == "regular":
        step = draw(st.integers(1, 3 * chunk + 2))
        return (step,) * (n // step) + ((n % step,) if n % step else ())
    sizes = draw(st.lists(st.integers(0, 2 * chunk + 3), min_size=1, max_size=12))
    out, total = [], 0
    for s in sizes:
        s = min(s, n - total)
        out.append(s)
        total += s
    return (*out, n - total) if total < n else tuple(out)


@st.composite
def many_shards(draw: st.DrawFn, region: bool):
    """A placement with up to 7 shards per dimension, where classes repeat."""
    ndim = draw(st.integers(1, 3))
    chunk = tuple(draw(st.integers(1, 3)) for _ in range(ndim))
    shard = tuple(c * draw(st.integers(1, 3)) for c in chunk)
    shape = tuple(draw(st.integers(1, 7 * s)) for s in shard)
    layout = ShardLayout(shape, shard, chunk)
    offset, size = [0] * ndim, list(shape)
    if region:
        for d, n in enumerate(shape):
            offset[d] = draw(st.integers(0, n - 1))
            size[d] = draw(st.integers(1, n - offset[d]))
    blocks = BlockGrid(tuple(draw(sizes_along(n, c)) for n, c in zip(size, chunk, strict=True)))
    itemsize = draw(st.sampled_from([1, 2]))
    per_part = draw(st.integers(1, layout.n_chunks_per_shard + 1))
    block_nbytes = max(blocks.max_block_elements, 1) * itemsize
    max_mem = feasible_budget(layout, block_nbytes, itemsize, per_part) + draw(st.integers(0, 2))
    return Placement(layout, blocks, tuple(offset)), itemsize, max_mem


def check_every_shard(plan: WritePlan, order: list[Coords], max_templates: int = 4096) -> int:
    """Assert translated plans equal brute force in ``order``; return how many were planned."""
    planned: list[Coords] = []

    def from_scratch(coords: Coords) -> ShardPlan:
        planned.append(coords)
        return plan.shard(coords)

    translated = TranslatedShards(plan.placement, from_scratch, max_templates)
    for coords in order:
        assert translated.shard(coords) == plan.shard(coords), coords
    return len(planned)


@pytest.mark.parametrize("region", [False, True])
@given(data=st.data())
@SETTINGS
def test_translated_plans_equal_brute_force_in_any_order(region: bool, data) -> None:
    placement, itemsize, max_mem = data.draw(many_shards(region))
    plan = plan_write(placement, itemsize, max_mem)
    shards = list(placement.shards())
    check_every_shard(plan, shards)
    check_every_shard(plan, data.draw(st.permutations(shards)))
    check_every_shard(plan, shards, max_templates=1)
    assert list(plan.iter_shards()) == [plan.shard(c) for c in shards]


@pytest.mark.parametrize("region", [False, True])
@given(data=st.data())
@SETTINGS
def test_translated_plans_on_the_plan_tests_problems(region: bool, data) -> None:
    placement, itemsize, max_mem = data.draw(problems(region=region))
    plan = plan_write(placement, itemsize, max_mem)
    check_every_shard(plan, list(placement.shards()))


@given(data=st.data())
@SETTINGS
def test_shards_in_a_box_are_those_of_the_box(data) -> None:
    placement, itemsize, max_mem = data.draw(many_shards(region=True))
    plan = plan_write(placement, itemsize, max_mem)
    ranges = tuple(
        range(a, data.draw(st.integers(a + 1, r.stop)))
        for r in placement.shard_ranges
        for a in [data.draw(st.integers(r.start, r.stop - 1))]
    )
    expected = [plan.shard(c) for c in itertools.product(*ranges)]
    assert list(plan.shards_in(ranges)) == expected


def test_a_regular_grid_is_planned_once_per_class() -> None:
    """Interior shards of aligned blocks share one plan: only the edges make more classes."""
    layout = ShardLayout((100, 96, 64), (16, 16, 16), (8, 8, 8))
    blocks = BlockGrid(tuple((8,) * (n // 8) + ((n % 8,) if n % 8 else ()) for n in layout.shape))
    plan = plan_write(Placement.whole(layout, blocks), 1, 2**20)
    shards = list(plan.placement.shards())
    assert len(shards) == 7 * 6 * 4
    # along dimension 0 the last shard (96..100) is an edge: two classes; one along the others
    assert check_every_shard(plan, shards) == 2


def test_misaligned_blocks_repeat_with_their_period() -> None:
    """Blocks of 24 over shards of 16: the pattern repeats every 3 shards (48 elements)."""
    layout = ShardLayout((16 * 12,), (16,), (4,))
    blocks = BlockGrid(((24,) * 8,))
    placement = Placement.whole(layout, blocks)
    plan = plan_write(placement, 1, 2**20)
    assert [neighbourhood(placement, 0, i)[0] for i in range(3)] == [
        (16, 0, 16, (0, 24)),
        (16, 0, 16, (-16, 8, 32)),
        (16, 0, 16, (-8, 16)),
    ]
    assert check_every_shard(plan, list(placement.shards())) == 3


def test_empty_blocks_keep_block_coordinates_exact() -> None:
    """An empty block shifts the blocks after it: such shards are classes of their own."""
    layout = ShardLayout((64,), (16,), (8,))
    blocks = BlockGrid(((16, 0, 16, 16, 16),))
    plan = plan_write(Placement.whole(layout, blocks), 1, 2**20)
    check_every_shard(plan, list(plan.placement.shards()))
    assert [s.parts[0].blocks for s in plan.iter_shards()] == [((0,),), ((2,),), ((3,),), ((4,),)]
    assert math.prod(len(r) for r in plan.placement.shard_ranges) == 4
