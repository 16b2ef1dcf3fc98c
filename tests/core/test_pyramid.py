"""Pyramid planning: tables and hypothesis against brute force."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardpipe.core.pyramid import (
    aligned_sizes,
    auto_factors,
    check_factors,
    downsample_blocks,
    downsample_nbytes,
    level_layout,
    level_region,
    level_shape,
    plan_levels,
    region_nbytes,
    steps_of,
    window_region,
)
from shardpipe.errors import InvalidArgumentError, MemoryBudgetError
from tests.support.examples import scaled


@pytest.mark.parametrize(
    ("shape", "factor", "expected"),
    [
        ((11,), (1,), (11,)),
        ((11,), (2,), (6,)),
        ((11,), (4,), (3,)),
        ((11, 8, 1), (4, 8, 1), (3, 1, 1)),
        ((1, 1), (2, 2), (1, 1)),
    ],
)
def test_level_shape_keeps_partial_windows(
    shape: tuple[int, ...], factor: tuple[int, ...], expected: tuple[int, ...]
) -> None:
    assert level_shape(shape, factor) == expected


@given(st.integers(1, 200), st.integers(1, 9))
def test_level_shape_counts_the_windows_that_hold_a_voxel(n: int, f: int) -> None:
    windows = {i // f for i in range(n)}
    assert level_shape((n,), (f,)) == (len(windows),)


@pytest.mark.parametrize(
    ("factors", "shape", "problem"),
    [
        ([(2, 2), (3, 3)], (64, 64), "not a multiple"),
        ([(2, 2), (2, 2)], (64, 64), "repeats"),
        ([(0, 2)], (64, 64), "below 1"),
        ([(2,)], (64, 64), "1 factors for 2 axes"),
        # bounds (issue 39): a window no wider than the level it downsamples, 64 levels
        ([(2**40, 1)], (64, 64), r"step 1099511627776 along axis 0 is wider than the 64"),
        ([(4, 2)], (3, 64), "step 4 along axis 0 is wider than the 3 voxels"),
        ([(2, 2), (4, 4), (8, 8)], (4, 64), "level 3: .*step 2 along axis 0 .* 1 voxel level 2"),
        ([(2**k, 2**k) for k in range(1, 1001)], (2**70, 2**70), "1000 levels after level 0"),
        ([(2**k, 1) for k in range(1, 65)], (2**70, 2**70), "at most 63"),
    ],
)
def test_check_factors_refuses_what_one_pass_cannot_make(
    factors: list[tuple[int, ...]], shape: tuple[int, ...], problem: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=problem) as caught:
        check_factors(factors, shape)
    assert caught.value.parameter == "scale_factors"


@pytest.mark.parametrize(
    ("factors", "shape"),
    [
        ([(2,), (4,)], (3,)),  # 3 -> 2 -> 1 voxels: the last window partial
        ([(4,)], (4,)),
        ([(2**40,)], (2**40,)),
        ([(2**k,) for k in range(1, 64)], (2**63,)),  # 64 levels, level 0 included
        ([(1, 2), (1, 4)], (1, 4)),  # an axis of one voxel is never downsampled
    ],
)
def test_check_factors_takes_windows_up_to_the_level_they_downsample(
    factors: list[tuple[int, ...]], shape: tuple[int, ...]
) -> None:
    check_factors(factors, shape)


def test_steps_are_the_ratios_of_consecutive_factors() -> None:
    assert steps_of([(1, 1, 1), (1, 2, 2), (2, 8, 8)]) == [(1, 1, 1), (1, 2, 2), (2, 4, 4)]


@pytest.mark.parametrize(
    ("shape", "space", "voxel", "chunk", "expected"),
    [
        # isotropic: halve all three until a level fits one inner chunk
        ((512, 512, 512), (True,) * 3, (1, 1, 1), (128, 128, 128), [(2, 2, 2), (4, 4, 4)]),
        # z voxels four times coarser: halve y, x until near cubes, then all, each axis
        # while it is longer than its chunk (a z of one chunk is never halved)
        ((64, 1024, 1024), (True,) * 3, (4, 1, 1), (64, 128, 128),
         [(1, 2, 2), (1, 4, 4), (1, 8, 8)]),
        ((256, 1024, 1024), (True,) * 3, (4, 1, 1), (64, 128, 128),
         [(1, 2, 2), (1, 4, 4), (2, 8, 8), (4, 8, 8)]),
        # time and channel axes are never halved
        ((10, 3, 100, 100), (False, False, True, True), (1, 1, 1, 1), (1, 1, 64, 64),
         [(1, 1, 2, 2)]),
        # already one chunk: no pyramid
        ((10, 20), (True, True), (1, 1), (16, 32), []),
        # a thin z that one chunk spans stays whole while y and x are halved
        ((2, 60, 700, 500), (False, True, True, True), (1, 1, 1, 1), (1, 60, 128, 64),
         [(1, 1, 2, 2), (1, 1, 4, 4), (1, 1, 8, 8)]),
        # an axis of one voxel is done
        ((1, 4096), (True, True), (1, 1), (1, 1024), [(1, 2), (1, 4)]),
    ],
)  # fmt: skip
def test_auto_factors_table(
    shape: tuple[int, ...],
    space: tuple[bool, ...],
    voxel: tuple[float, ...],
    chunk: tuple[int, ...],
    expected: list[tuple[int, ...]],
) -> None:
    assert auto_factors(shape, space, voxel, chunk) == expected


@settings(max_examples=scaled(80), deadline=None)
@given(
    st.lists(st.integers(1, 3000), min_size=2, max_size=4),
    st.lists(st.floats(0.1, 10), min_size=4, max_size=4),
    st.lists(st.integers(1, 512), min_size=4, max_size=4),
)
def test_auto_factors_stop_at_one_chunk_and_form_a_chain(
    shape: list[int], voxel: list[float], chunk: list[int]
) -> None:
    ndim = len(shape)
    factors = auto_factors(tuple(shape), (True,) * ndim, voxel[:ndim], tuple(chunk[:ndim]))
    check_factors(factors, tuple(shape))  # a chain of multiples, each window within its level
    levels = [tuple(shape), *(level_shape(tuple(shape), f) for f in factors)]
    # every level but the last spans more than one chunk along some axis
    for before in levels[:-1]:
        assert any(n > c for n, c in zip(before, chunk, strict=False))
    last = levels[-1]
    assert all(n <= c for n, c in zip(last, chunk, strict=False)) or len(factors) == 16
    # each step halves the axes longer than a chunk within a factor two of the finest voxels
    size = list(voxel[:ndim])
    before_factor = (1,) * ndim
    for factor, level in zip(factors, levels, strict=False):
        step = [a // b for a, b in zip(factor, before_factor, strict=True)]
        halvable = [d for d in range(ndim) if level[d] > chunk[d]]
        finest = min(size[d] for d in halvable)
        assert step == [2 if d in halvable and size[d] < 2 * finest else 1 for d in range(ndim)]
        size = [v * s for v, s in zip(size, step, strict=True)]
        before_factor = factor


@given(st.integers(1, 500), st.integers(1, 64), st.integers(1, 8))
def test_level_layout_clips_to_whole_chunks(n: int, chunk: int, per_shard: int) -> None:
    (shard,), (inner,) = level_layout((n,), (chunk * per_shard,), (chunk,))
    assert shard % inner == 0
    assert inner == min(chunk, n)
    assert shard >= min(n, chunk * per_shard)  # one shard covers what one shard covered
    assert shard - inner < n or shard == inner  # never a whole chunk past the level


def test_plan_levels_gives_shapes_steps_and_layouts() -> None:
    levels = plan_levels((100, 64), [(2, 2), (4, 8)], [(32, 32)] * 3, [(16, 16)] * 3)
    assert [lv.shape for lv in levels] == [(100, 64), (50, 32), (25, 8)]
    assert [lv.step for lv in levels] == [(1, 1), (2, 2), (2, 4)]
    assert [lv.shard_shape for lv in levels] == [(32, 32), (32, 32), (32, 8)]
    assert [lv.n_shards for lv in levels] == [8, 2, 1]


@given(st.lists(st.integers(1, 50), min_size=1, max_size=8), st.integers(1, 6))
def test_aligned_sizes_cover_the_same_length_with_edges_on_multiples(
    sizes: list[int], step: int
) -> None:
    out = aligned_sizes(sizes, step)
    assert sum(out) == sum(sizes)
    edges = np.cumsum(out)[:-1]
    assert all(e % step == 0 for e in edges)


@settings(max_examples=scaled(80), deadline=None)
@given(
    st.lists(st.lists(st.integers(1, 40), min_size=1, max_size=5), min_size=1, max_size=3),
    st.data(),
    st.sampled_from(["mean", "mode", "nearest"]),
    st.sampled_from(["uint8", "uint16", "float32", "int64"]),
)
def test_downsample_blocks_are_whole_windows_within_the_budget(
    chunks: list[list[int]], data: st.DataObject, method: str, dtype: str
) -> None:
    step = data.draw(st.tuples(*(st.integers(1, 4) for _ in chunks)))
    budget = data.draw(st.integers(70_000, 3_000_000))
    joined = data.draw(st.booleans())
    kind = np.dtype(dtype)
    try:
        out = downsample_blocks(
            chunks, step, kind, method, target_nbytes=50_000, budget=budget, joined=joined
        )
    except MemoryBudgetError:
        # refused only when a region of one window per axis does not fit
        assert region_nbytes(step, step, kind, method, joined=joined) > budget
        return
    for sizes, new, s in zip(chunks, out, step, strict=True):
        assert sum(new) == sum(sizes)
        assert all(e % s == 0 for e in np.cumsum(new)[:-1])
    largest = tuple(max(b) for b in out)
    assert region_nbytes(largest, step, kind, method, joined=joined) <= budget


@pytest.mark.parametrize(
    ("method", "dtype"),
    [("mean", "uint8"), ("mean", "uint64"), ("mean", "float64"), ("mode", "uint32"),
     ("nearest", "uint16")],
)  # fmt: skip
def test_downsample_nbytes_covers_what_the_task_allocates(method: str, dtype: str) -> None:
    import tracemalloc

    from shardpipe.core.downsample import downsample_block

    block = (np.arange(24 * 40 * 36) % 7).astype(dtype).reshape(24, 40, 36)
    step = (2, 2, 2)
    tracemalloc.start()
    downsample_block(block, step, method)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    # the model counts the block itself too (held by the task while it runs)
    assert peak + block.nbytes <= downsample_nbytes(block.shape, step, np.dtype(dtype), method)


@given(st.integers(0, 60), st.integers(0, 60), st.integers(1, 8), st.integers(1, 70))
def test_level_region_is_the_windows_touching_the_region(a: int, b: int, f: int, n: int) -> None:
    start, stop = sorted((min(a, n), min(b, n)))
    if start == stop:
        return
    shape = level_shape((n,), (f,))
    ((lo, hi),) = level_region(((start, stop),), (f,), shape)
    touched = {i // f for i in range(start, stop)}
    assert set(range(lo, hi)) == touched
    ((wlo, whi),) = window_region(((start, stop),), (f,), (n,))
    assert set(range(wlo, whi)) == {i for i in range(n) if i // f in touched}
    assert math.ceil(n / f) == shape[0]
