"""Tests of write planning in ``shardpipe.core.plan`` against brute force.

Plans are made over whole arrays and over regions of arrays; every plan
must keep every task within ``max_mem`` by the memory model.
"""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardpipe.core.cut import cut_block
from shardpipe.core.grid import BlockGrid, ShardLayout
from shardpipe.core.memory import MemoryModel
from shardpipe.core.parts import choose_part_chunks
from shardpipe.core.plan import PlanError, WritePlan, plan_write
from shardpipe.core.region import Placement
from shardpipe.errors import MemoryBudgetError
from shardpipe.testing.strategies import block_chunks
from tests.support.examples import scaled

SETTINGS = settings(max_examples=scaled(60), deadline=None)
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


def plan(layout: ShardLayout, blocks: BlockGrid, itemsize: int, max_mem: int, **kw) -> WritePlan:
    """Plan a write of the whole array."""
    return plan_write(Placement.whole(layout, blocks), itemsize, max_mem, **kw)


def feasible_budget(layout: ShardLayout, block_nbytes: int, itemsize: int, chunks: int) -> int:
    """A max_mem with room for parts of about ``chunks`` inner chunks, direct or gathered."""
    model = MemoryModel(chunk_nbytes(layout, itemsize))
    raw = chunks * chunk_nbytes(layout, itemsize)
    return max(model.direct(block_nbytes, raw), model.gathered(raw))


@st.composite
def problems(draw: st.DrawFn, aligned: bool = False, region: bool = False):
    """A placement of blocks in a layout, an itemsize and a feasible max_mem."""
    ndim = draw(st.integers(1, 3))
    chunk = tuple(draw(st.integers(1, 3)) for _ in range(ndim))
    shard = tuple(c * draw(st.integers(1, 3)) for c in chunk)
    shape = tuple(draw(st.integers(1, 2 * s + 2)) for s in shard)
    layout = ShardLayout(shape, shard, chunk)
    offset = [0] * ndim
    size = list(shape)
    if region:
        for d, n in enumerate(shape):
            offset[d] = draw(st.integers(0, n - 1))
            size[d] = draw(st.integers(1, n - offset[d]))
    if aligned and not region:
        sizes = [c * draw(st.integers(1, 4)) for c in chunk]
        chunks = tuple(
            (b,) * (n // b) + ((n % b,) if n % b else ()) for n, b in zip(shape, sizes, strict=True)
        )
    else:
        chunks = tuple(draw(block_chunks(n, max_blocks=5)) for n in size)
    blocks = BlockGrid(chunks)
    itemsize = draw(st.sampled_from([1, 2, 4]))
    per_part = draw(st.integers(1, layout.n_chunks_per_shard + 1))
    block_nbytes = blocks.max_block_elements * itemsize
    floor = feasible_budget(layout, block_nbytes, itemsize, per_part)
    placement = Placement(layout, blocks, tuple(offset))
    return placement, itemsize, floor + draw(st.integers(0, 2))


@pytest.mark.parametrize("region", [False, True])
@given(data=st.data())
@SETTINGS
def test_parts_fit_the_budget_and_tile_the_touched_chunks(region: bool, data) -> None:
    placement, itemsize, max_mem = data.draw(problems(region=region))
    result = plan_write(placement, itemsize, max_mem)
    assert result.max_projected_mem <= max_mem
    assert [s.coords for s in result.shards] == list(placement.shards())
    for shard in result.shards:
        seen = []
        for number, part in enumerate(shard.parts):
            assert part.number == number
            assert all(
                b - a <= p
                for a, b, p in zip(
                    part.chunks.start, part.chunks.stop, result.part_chunks, strict=True
                )
            )
            seen.extend(part.chunks.chunks())
        assert len(seen) == len(set(seen))
        assert set(seen) == set(placement.coverage(shard.coords).touched.chunks())
        assert shard.is_single_part == (len(shard.parts) == 1)


@pytest.mark.parametrize("region", [False, True])
@given(data=st.data())
@SETTINGS
def test_part_regions_and_blocks_match_brute_force(region: bool, data) -> None:
    placement, itemsize, max_mem = data.draw(problems(region=region))
    layout, blocks = placement.layout, placement.blocks
    result = plan_write(placement, itemsize, max_mem)
    for shard in result.shards:
        for part in shard.parts:
            boxes = [clipped_chunk(layout, shard.coords, c) for c in part.chunks.chunks()]
            inside = [overlap(b, placement.region) for b in boxes]
            assert None not in inside  # every chunk of a part is touched by the region
            hull = tuple(
                (min(b[d][0] for b in inside), max(b[d][1] for b in inside))
                for d in range(layout.ndim)
            )
            assert part.region == hull
            expected = [b for b in all_blocks(blocks) if overlap(placement.block_box(b), hull)]
            assert list(part.blocks) == expected
            assert part.is_direct == (len(expected) == 1)


@pytest.mark.parametrize("aligned", [False, True])
@given(data=st.data())
@SETTINGS
def test_cut_block_matches_brute_force(aligned: bool, data: st.DataObject) -> None:
    placement, itemsize, max_mem = data.draw(problems(aligned=aligned))
    layout, blocks = placement.layout, placement.blocks
    result = plan_write(placement, itemsize, max_mem)
    for shard in result.shards:
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
def test_projected_memory_fits_and_tasks_add_up(aligned: bool, data: st.DataObject) -> None:
    placement, itemsize, max_mem = data.draw(problems(aligned=aligned))
    result = plan_write(placement, itemsize, max_mem)
    for in_process in (False, True):
        assert all(
            m.nbytes <= max_mem for m in result.projected_peaks(in_process=in_process).values()
        )
    assert result.max_projected_mem <= max_mem
    tasks = sum(
        sum(1 if p.is_direct else 1 + len(p.blocks) for p in s.parts)
        + (0 if s.is_single_part else 2)
        for s in result.shards
    )
    assert result.num_tasks == tasks
    assert f"num_tasks={tasks}" in repr(result)
    local = sum(
        sum(1 if p.is_direct or p.gather_in_task else 1 + len(p.blocks) for p in s.parts)
        + (0 if s.is_single_part else 2)
        for s in result.shards
    )
    assert sum(result.task_counts_in_process.values()) == local
    assert result.max_parts_per_shard == max(len(s.parts) for s in result.shards)


@given(problems())
@SETTINGS
def test_max_parts_limit(problem) -> None:
    placement, itemsize, max_mem = problem
    most = plan_write(placement, itemsize, max_mem).max_parts_per_shard
    plan_write(placement, itemsize, max_mem, max_parts=most)
    if most > 1:
        with pytest.raises(PlanError, match="parts"):
            plan_write(placement, itemsize, max_mem, max_parts=most - 1)


def test_block_larger_than_max_mem_is_rejected() -> None:
    layout = ShardLayout((8, 8), (4, 4), (2, 2))
    blocks = BlockGrid(((8,), (4, 4)))
    # a direct part of one 8-byte chunk: the 64-byte block + the chunk encoded
    # + 3 x the chunk being encoded = 96 bytes
    plan(layout, blocks, 2, 96)
    with pytest.raises(MemoryBudgetError, match="largest Dask block holds 64 bytes") as info:
        plan(layout, blocks, 2, 95)
    assert info.value.parameter == "max_mem"
    assert (info.value.projected, info.value.budget) == (96, 95)
    assert "1 more than max_mem=95" in str(info.value)


def test_chunk_too_large_for_a_gathered_part_is_rejected() -> None:
    layout = ShardLayout((8, 8), (4, 4), (2, 2))
    blocks = BlockGrid(((3, 5), (1,) * 8))  # thin misaligned blocks: parts gather pieces
    chunk = 2 * 2 * 4
    model = MemoryModel(chunk)
    needed = model.gathered(chunk)  # 2 x encoded + canvas + working (3 chunks)
    assert needed == 2 * chunk + chunk + 3 * chunk == 96
    assert model.direct(5 * 4, chunk) < needed  # the blocks themselves fit
    plan(layout, blocks, 4, needed)
    with pytest.raises(MemoryBudgetError, match="inner chunk"):
        plan(layout, blocks, 4, needed - 1)
    with pytest.raises(PlanError, match="inner chunk"):
        choose_part_chunks(layout, 4, 15)


def test_stamp_larger_than_max_mem_is_rejected() -> None:
    layout = ShardLayout((8,), (8,), (1,))
    blocks = BlockGrid(((8,),))
    plan(layout, blocks, 1, 100, stamp_nbytes=100)
    with pytest.raises(MemoryBudgetError, match="stamp-shard"):
        plan(layout, blocks, 1, 100, stamp_nbytes=101)


def test_region_must_fit_the_array() -> None:
    with pytest.raises(PlanError, match="does not fit"):
        Placement(ShardLayout((8,), (4,), (2,)), BlockGrid(((4, 3),)), (2,))


def test_plan_errors_are_value_errors() -> None:
    assert issubclass(PlanError, ValueError)
    assert issubclass(MemoryBudgetError, PlanError)


def assert_all_direct(result: WritePlan, n_shards: int, n_parts: int) -> None:
    assert len(result.shards) == n_shards
    for shard in result.shards:
        assert len(shard.parts) == n_parts
        assert all(p.is_direct for p in shard.parts)


@pytest.mark.parametrize(
    ("max_mem", "part_chunks", "n_parts", "num_tasks"),
    [
        (1 << 30, (2, 4, 4), 1, 64),
        # 16 MiB blocks: a direct part may hold 24 - 16 - 1.5 (working) = 6.5 MiB,
        # 13 inner chunks of 512 KiB: slabs of 1 x 3 x 4 chunks, 4 parts a shard
        (24 * MiB, (1, 3, 4), 4, 64 * (4 + 2)),
    ],
)
def test_large_aligned_volume_table(max_mem, part_chunks, n_parts, num_tasks) -> None:
    layout = ShardLayout((512, 1024, 1024), (128, 256, 256), (64, 64, 64))
    blocks = BlockGrid(((128,) * 4, (256,) * 4, (256,) * 4))
    result = plan(layout, blocks, 2, max_mem)
    assert_all_direct(result, 64, n_parts)
    assert result.part_chunks == part_chunks
    assert result.num_tasks == num_tasks
    assert result.max_projected_mem <= max_mem
    assert f"num_tasks={num_tasks}" in repr(result)


def test_aligned_blocks_that_fit_the_budget_become_direct_parts() -> None:
    # Blocks of 2x2x2 one-byte chunks tile the 4x4x4-chunk shard; a direct part of
    # one block holds 8 (block) + 8 (encoded) + 3 (working) = 19 <= 24 bytes, so
    # parts are whole blocks (choose_part_chunks puts part edges on block edges).
    layout = ShardLayout((4, 4, 4), (4, 4, 4), (1, 1, 1))
    blocks = BlockGrid(((2, 2), (2, 2), (2, 2)))
    result = plan(layout, blocks, 1, 24)
    assert_all_direct(result, 1, 8)


def test_slabs_are_gathered_in_the_task_only_where_they_fit() -> None:
    # (1, 1024, 1024) uint16 slabs (2 MiB each) feeding (128, 256, 256) shards:
    # each shard's task would hold 128 slabs (256 MiB) to cut them itself
    layout = ShardLayout((512, 1024, 1024), (128, 256, 256), (64, 64, 64))
    blocks = BlockGrid(((1,) * 512, (1024,), (1024,)))
    roomy = plan(layout, blocks, 2, 1 << 30)
    assert all(p.gather_in_task for s in roomy.shards for p in s.parts)
    assert roomy.task_counts_in_process == {"write-shard": 64}
    tight = plan(layout, blocks, 2, 200 * MiB)
    assert not any(p.gather_in_task for s in tight.shards for p in s.parts)
    assert tight.task_counts_in_process["encode-piece"] == 64 * 128
    assert tight.max_projected_mem <= 200 * MiB


def test_region_plan_counts_full_and_partial_chunks() -> None:
    layout = ShardLayout((16, 16), (8, 8), (4, 4))
    # rows [2, 10), all columns: chunk rows 0 and 2 partly covered, chunk row 1 fully
    placement = Placement(layout, BlockGrid(((8,), (16,))), (2, 0))
    result = plan_write(placement, 1, 1 << 20)
    assert result.n_shards == 4
    assert (result.n_chunks_full, result.n_chunks_partial) == (4, 8)
    assert result.nbytes_in == 8 * 16


def test_padded_parts_count_the_stores_smallest_part() -> None:
    layout = ShardLayout((64, 64), (64, 64), (8, 8))
    blocks = BlockGrid(((8,) * 8, (64,)))
    chunk = 64
    s3_like = MemoryModel(chunk, join_copies=True, min_part_nbytes=5 << 20)
    roomy = plan_write(Placement.whole(layout, blocks), 1, 12 << 20, model=s3_like)
    assert roomy.n_multipart_shards == 0  # one part: a single PUT, never padded
    tight = 1_500  # forces parts; each would hold 2 x 5 MiB of padded part
    with pytest.raises(MemoryBudgetError, match="pads every part"):
        plan_write(Placement.whole(layout, blocks), 1, tight, model=s3_like)
    plan_write(Placement.whole(layout, blocks), 1, tight, model=MemoryModel(chunk))
