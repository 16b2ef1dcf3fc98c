"""Tests of write planning in ``shardpipe.core.plan`` against brute force."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardpipe.core.grid import BlockGrid, ShardLayout, chunks_in_array
from shardpipe.core.plan import PlanError, WritePlan, choose_part_chunks, cut_block, plan_write

SETTINGS = settings(max_examples=60, deadline=None)
MiB = 1 << 20


def chunk_nbytes(layout: ShardLayout, itemsize: int) -> int:
    return math.prod(layout.chunk_shape) * itemsize


def clipped_chunk(layout: ShardLayout, shard, local):
    """Box of the in-array elements of an inner chunk, computed by hand."""
    box = []
    for i, j, s, c, n in zip(
        shard, local, layout.shard_shape, layout.chunk_shape, layout.shape, strict=True
    ):
        start = i * s + j * c
        box.append((start, min(start + c, n)))
    return None if any(a >= b for a, b in box) else tuple(box)


def overlap(a, b):
    out = tuple((max(a0, b0), min(a1, b1)) for (a0, a1), (b0, b1) in zip(a, b, strict=True))
    return None if any(x >= y for x, y in out) else out


def size(box) -> int:
    return math.prod(b - a for a, b in box)


def all_blocks(blocks: BlockGrid):
    return itertools.product(*(range(len(c)) for c in blocks.chunks))


@st.composite
def partitions(draw: st.DrawFn, n: int) -> tuple[int, ...]:
    cuts = draw(st.sets(st.integers(1, n - 1), max_size=4)) if n > 1 else set()
    bounds = [0, *sorted(cuts), n]
    return tuple(b - a for a, b in itertools.pairwise(bounds))


@st.composite
def problems(draw: st.DrawFn, aligned: bool = False):
    """A layout, a block grid over it, an itemsize and a feasible max_mem."""
    ndim = draw(st.integers(1, 3))
    chunk = tuple(draw(st.integers(1, 3)) for _ in range(ndim))
    shard = tuple(c * draw(st.integers(1, 3)) for c in chunk)
    shape = tuple(draw(st.integers(1, 2 * s + 2)) for s in shard)
    layout = ShardLayout(shape, shard, chunk)
    if aligned:
        sizes = [c * draw(st.integers(1, 4)) for c in chunk]
        chunks = tuple(
            (b,) * (n // b) + ((n % b,) if n % b else ()) for n, b in zip(shape, sizes, strict=True)
        )
    else:
        chunks = tuple(draw(partitions(n)) for n in shape)
    blocks = BlockGrid(chunks)
    itemsize = draw(st.sampled_from([1, 2, 4]))
    per_part = draw(st.integers(1, layout.n_chunks_per_shard + 1))
    floor = max(blocks.max_block_elements * itemsize, 3 * per_part * chunk_nbytes(layout, itemsize))
    return layout, blocks, itemsize, floor + draw(st.integers(0, 2))


@given(problems())
@SETTINGS
def test_parts_fit_the_budget_and_tile_each_shard(problem) -> None:
    layout, blocks, itemsize, max_mem = problem
    plan = plan_write(layout, blocks, itemsize, max_mem)
    limit = max(max_mem // 3, chunk_nbytes(layout, itemsize))
    assert plan.part_nbytes <= limit
    assert [s.coords for s in plan.shards] == list(layout.shard_coords())
    for shard in plan.shards:
        seen = []
        for number, part in enumerate(shard.parts):
            assert part.number == number
            assert part.chunks.n_chunks * chunk_nbytes(layout, itemsize) <= limit
            assert all(
                b - a <= p
                for a, b, p in zip(
                    part.chunks.start, part.chunks.stop, plan.part_chunks, strict=True
                )
            )
            seen.extend(part.chunks.chunks())
        assert len(seen) == len(set(seen))
        assert set(seen) == set(chunks_in_array(layout, shard.coords).chunks())
        assert shard.is_single_part == (len(shard.parts) == 1)


@given(problems())
@SETTINGS
def test_part_regions_and_blocks_match_brute_force(problem) -> None:
    layout, blocks, itemsize, max_mem = problem
    plan = plan_write(layout, blocks, itemsize, max_mem)
    for shard in plan.shards:
        for part in shard.parts:
            boxes = [clipped_chunk(layout, shard.coords, c) for c in part.chunks.chunks()]
            assert None not in boxes
            hull = tuple(
                (min(b[d][0] for b in boxes), max(b[d][1] for b in boxes))
                for d in range(layout.ndim)
            )
            assert part.region == hull
            assert sum(map(size, boxes)) == size(part.region)
            expected = [b for b in all_blocks(blocks) if overlap(blocks.block_box(b), hull)]
            assert list(part.blocks) == expected
            assert part.is_direct == (len(expected) == 1)


@pytest.mark.parametrize("aligned", [False, True])
@given(data=st.data())
@SETTINGS
def test_cut_block_matches_brute_force(aligned: bool, data: st.DataObject) -> None:
    layout, blocks, itemsize, max_mem = data.draw(problems(aligned=aligned))
    plan = plan_write(layout, blocks, itemsize, max_mem)
    for shard in plan.shards:
        for part in shard.parts:
            whole_in: dict = {c: [] for c in part.chunks.chunks()}
            partial_in: dict = {c: [] for c in part.chunks.chunks()}
            for block in all_blocks(blocks):
                block_box = blocks.block_box(block)
                cut = cut_block(layout, shard.coords, part, block_box)
                whole, partial = [], []
                for local in part.chunks.chunks():
                    chunk = clipped_chunk(layout, shard.coords, local)
                    common = overlap(chunk, block_box)
                    if common is None:
                        continue
                    if common == chunk:
                        whole.append(local)
                        whole_in[local].append(block)
                    else:
                        partial.append((local, common))
                        partial_in[local].append(common)
                assert cut.whole == tuple(whole)
                assert cut.partial == tuple(partial)
                if block not in part.blocks:
                    assert not whole and not partial
            for local, holders in whole_in.items():
                chunk = clipped_chunk(layout, shard.coords, local)
                if holders:
                    assert len(holders) == 1 and not partial_in[local]
                else:
                    assert len(partial_in[local]) >= 2
                    assert sum(map(size, partial_in[local])) == size(chunk)
                if aligned:  # block edges fall on chunk edges: nothing straddles
                    assert len(holders) == 1


@pytest.mark.parametrize("aligned", [False, True])
@given(data=st.data())
@SETTINGS
def test_projected_memory_stays_near_max_mem(aligned: bool, data: st.DataObject) -> None:
    layout, blocks, itemsize, max_mem = data.draw(problems(aligned=aligned))
    plan = plan_write(layout, blocks, itemsize, max_mem)
    assert plan.block_nbytes <= max_mem
    assert plan.max_projected_mem <= max(max_mem, plan.block_nbytes + max_mem // 3)
    if plan.block_nbytes + max_mem // 3 <= max_mem:
        assert plan.max_projected_mem <= max_mem
    tasks = sum(
        sum(1 if p.is_direct else 1 + len(p.blocks) for p in s.parts)
        + (0 if s.is_single_part else 2)
        for s in plan.shards
    )
    assert plan.num_tasks == tasks
    assert f"num_tasks={tasks}" in repr(plan)
    assert plan.max_parts_per_shard == max(len(s.parts) for s in plan.shards)


@given(problems())
@SETTINGS
def test_max_parts_limit(problem) -> None:
    layout, blocks, itemsize, max_mem = problem
    most = plan_write(layout, blocks, itemsize, max_mem).max_parts_per_shard
    plan_write(layout, blocks, itemsize, max_mem, max_parts=most)
    if most > 1:
        with pytest.raises(PlanError, match="parts"):
            plan_write(layout, blocks, itemsize, max_mem, max_parts=most - 1)


def test_block_larger_than_max_mem_is_rejected() -> None:
    layout = ShardLayout((8, 8), (4, 4), (2, 2))
    blocks = BlockGrid(((8,), (4, 4)))
    plan_write(layout, blocks, 2, 64)
    with pytest.raises(PlanError, match="max_mem"):
        plan_write(layout, blocks, 2, 63)


def test_chunk_larger_than_a_third_of_max_mem_is_rejected() -> None:
    layout = ShardLayout((8, 8), (4, 4), (2, 2))
    blocks = BlockGrid(((2, 2, 2, 2), (2, 2, 2, 2)))
    plan_write(layout, blocks, 4, 48)
    with pytest.raises(PlanError, match="inner chunk"):
        plan_write(layout, blocks, 4, 47)
    with pytest.raises(PlanError, match="inner chunk"):
        choose_part_chunks(layout, 4, 15)


def test_block_grid_of_another_shape_is_rejected() -> None:
    with pytest.raises(PlanError, match="shape"):
        plan_write(ShardLayout((8,), (4,), (2,)), BlockGrid(((4, 3),)), 1, 1024)


def test_plan_error_is_a_value_error() -> None:
    assert issubclass(PlanError, ValueError)


def assert_all_direct(plan: WritePlan, n_shards: int, n_parts: int) -> None:
    assert len(plan.shards) == n_shards
    for shard in plan.shards:
        assert len(shard.parts) == n_parts
        assert all(p.is_direct for p in shard.parts)


@pytest.mark.parametrize(
    ("max_mem", "part_chunks", "n_parts", "num_tasks"),
    [(1 << 30, (2, 4, 4), 1, 64), (24 * MiB, (1, 4, 4), 2, 64 * 4)],
)
def test_large_aligned_volume_table(max_mem, part_chunks, n_parts, num_tasks) -> None:
    layout = ShardLayout((512, 1024, 1024), (128, 256, 256), (64, 64, 64))
    blocks = BlockGrid(((128,) * 4, (256,) * 4, (256,) * 4))
    plan = plan_write(layout, blocks, 2, max_mem)
    assert_all_direct(plan, 64, n_parts)
    assert plan.part_chunks == part_chunks
    assert plan.num_tasks == num_tasks
    assert plan.max_projected_mem <= max_mem
    assert f"num_tasks={num_tasks}" in repr(plan)


def test_aligned_blocks_that_fit_the_budget_become_direct_parts() -> None:
    # Blocks of 2x2x2 chunks tile the 4x4x4-chunk shard and one block (8 chunks)
    # fits the part budget of max_mem // 3 = 8 bytes: the docstring of
    # choose_part_chunks promises part edges on block edges, i.e. one block per part.
    layout = ShardLayout((4, 4, 4), (4, 4, 4), (1, 1, 1))
    blocks = BlockGrid(((2, 2), (2, 2), (2, 2)))
    plan = plan_write(layout, blocks, 1, 24)
    assert_all_direct(plan, 1, 8)
