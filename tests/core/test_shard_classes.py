"""Shard classes (``shardpipe.core.shard_classes``) and plan totals against brute force.

Every shard of a class must have the plan of its representative moved by
the shard offset; totals added up class by class must equal totals added
up shard by shard, for regular and irregular blocks, whole arrays and regions.
"""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardpipe.core.grid import BlockGrid, ShardLayout
from shardpipe.core.plan import ShardPlan, WritePlan, plan_write
from shardpipe.core.plan_totals import TotalsBuilder
from shardpipe.core.region import Placement
from shardpipe.core.shard_classes import n_shard_classes, profile, shard_classes
from tests.support.examples import scaled

from .test_plan import problems

SETTINGS = settings(max_examples=scaled(80), deadline=None)


def summary(plan: WritePlan, shard: ShardPlan):
    """What the totals see of one shard: counts and peak bytes, without names."""
    totals = TotalsBuilder(plan.model, plan.chunk_nbytes, plan.stamp_nbytes)
    totals.add(shard)
    t = totals.result()
    peaks = [{k: m.nbytes for k, m in p.items()} for p in (t.peaks, t.peaks_in_process)]
    counts = (t.n_parts, t.n_multipart_shards, t.n_gathered_parts, t.n_chunks_touched)
    return t.task_counts, t.task_counts_in_process, counts, t.n_chunks_full, peaks


def brute_totals(plan: WritePlan):
    totals = TotalsBuilder(plan.model, plan.chunk_nbytes, plan.stamp_nbytes)
    for shard in plan.iter_shards():
        totals.add(shard)
    return totals.result()


@pytest.mark.parametrize("region", [False, True])
@given(data=st.data())
@SETTINGS
def test_every_shard_of_a_class_adds_up_like_its_representative(region: bool, data) -> None:
    placement, itemsize, max_mem = data.draw(problems(region=region))
    plan = plan_write(placement, itemsize, max_mem)
    part_chunks = plan.part_chunks
    classes = list(shard_classes(placement, part_chunks))
    assert sum(c.count for c in classes) == placement.n_shards
    assert len(classes) == n_shard_classes(placement, part_chunks)

    def key(coords):
        return tuple(profile(placement, part_chunks, d, i) for d, i in enumerate(coords))

    members = {c.representative: [] for c in classes}
    for coords in placement.shards():
        reps = [c.representative for c in classes if key(c.representative) == key(coords)]
        assert len(reps) == 1  # each shard in exactly one class
        members[reps[0]].append(coords)
    for shard_class in classes:
        assert len(members[shard_class.representative]) == shard_class.count
        expected = summary(plan, plan.shard(shard_class.representative))
        for coords in members[shard_class.representative]:
            assert summary(plan, plan.shard(coords)) == expected


@pytest.mark.parametrize("aligned", [False, True])
@given(data=st.data())
@SETTINGS
def test_totals_by_class_equal_totals_by_shard(aligned: bool, data) -> None:
    placement, itemsize, max_mem = data.draw(problems(aligned=aligned, region=not aligned))
    plan = plan_write(placement, itemsize, max_mem)
    by_class, by_shard = plan.totals, brute_totals(plan)
    assert by_class.task_counts == by_shard.task_counts
    assert by_class.task_counts_in_process == by_shard.task_counts_in_process
    for name in (
        "n_parts",
        "n_multipart_shards",
        "max_parts_per_shard",
        "n_gathered_parts",
        "n_chunks_touched",
        "n_chunks_full",
    ):
        assert getattr(by_class, name) == getattr(by_shard, name), name
    for mine, theirs in (
        (by_class.peaks, by_shard.peaks),
        (by_class.peaks_in_process, by_shard.peaks_in_process),
    ):
        assert {k: m.nbytes for k, m in mine.items()} == {k: m.nbytes for k, m in theirs.items()}
    assert by_class.n_classes <= by_shard.n_classes == placement.n_shards


def test_a_petabyte_plan_is_a_handful_of_classes() -> None:
    """1 PB of uint8 in 1 GiB shards and misaligned (500,)^3 blocks: 941,192 shards."""
    n = 100_000
    layout = ShardLayout((n,) * 3, (1024,) * 3, (128,) * 3)
    sizes = (500,) * (n // 500)
    placement = Placement.whole(layout, BlockGrid((sizes,) * 3))
    plan = plan_write(placement, 1, 1 << 30)
    assert plan.n_shards == math.ceil(n / 1024) ** 3
    assert plan.totals.n_classes <= 10**3  # a few profiles per dimension
    assert sum(plan.task_counts.values()) == plan.num_tasks > plan.n_shards


def test_irregular_blocks_give_one_class_per_profile() -> None:
    layout = ShardLayout((40,), (10,), (5,))
    placement = Placement.whole(layout, BlockGrid(((3, 7, 10, 10, 4, 6),)))
    classes = list(shard_classes(placement, (2,)))
    # shards 1 and 2 are each one whole block; shards 0 and 3 are cut differently
    assert sorted(c.count for c in classes) == [1, 1, 2]
    assert list(itertools.chain.from_iterable([c.representative] for c in classes)) == [
        (0,),
        (1,),
        (3,),
    ]
