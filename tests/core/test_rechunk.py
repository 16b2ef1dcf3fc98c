"""Read planning of rechunks: block shapes against the rules, read costs against brute force."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shardpipe.core.source_blocks import (
    axis_reads,
    intermediate_chunks,
    read_block_shape,
    read_cost,
    straddles,
)

MiB = 1 << 20

CASES = [
    # shape, read unit, shards, inner chunks, budget -> block
    (
        "slabs into cubes, roomy",
        (512, 1024, 1024),
        (1, 1024, 1024),
        (256,) * 3,
        (64,) * 3,
        1024 * MiB,
        (256, 1024, 1024),
    ),
    (
        "slabs into cubes, tight",
        (512, 1024, 1024),
        (1, 1024, 1024),
        (256,) * 3,
        (64,) * 3,
        200 * MiB,
        (64, 1024, 1024),
    ),
    ("units divide shards", (1024,) * 3, (128,) * 3, (256,) * 3, (64,) * 3, 64 * MiB, (256,) * 3),
    (
        "units divide shards, tight",
        (1024,) * 3,
        (128,) * 3,
        (256,) * 3,
        (64,) * 3,
        10 * MiB,
        (128, 128, 256),
    ),
    ("misaligned units", (1000, 1000), (100, 100), (256, 256), (64, 64), 10 * MiB, (300, 300)),
    (
        "one unit over budget",
        (64, 4096, 4096),
        (64, 4096, 4096),
        (64, 256, 256),
        (64, 64, 64),
        64 * MiB,
        (64, 512, 1024),
    ),
    ("small array", (10, 10), (5, 5), (256, 256), (64, 64), MiB, (10, 10)),
    (
        # one inner chunk spans the time axis: only the whole axis holds it whole, so
        # the space axes halve (not time, into (200, 128, 128) blocks that cut it)
        "chunks of time into series",
        (730, 256, 512),
        (100, 64, 64),
        (730, 128, 128),
        (730, 32, 32),
        8 * MiB,
        (730, 64, 64),
    ),
    (
        # halving 730 goes 365, then 146 (a divisor of the inner chunk), not 182
        "time slices into series",
        (730, 256, 512),
        (1, 256, 512),
        (730, 128, 128),
        (730, 32, 32),
        64 * MiB,
        (146, 256, 512),
    ),
    (
        # then 73, then 10 (the largest divisor of 730 under half of 73), not 36
        "time slices into series, small budget",
        (730, 256, 512),
        (1, 256, 512),
        (730, 128, 128),
        (730, 32, 32),
        12 * MiB,
        (10, 256, 512),
    ),
]


@pytest.mark.parametrize(
    ("shape", "unit", "shards", "chunks", "budget", "expected"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_block_shape_table(shape, unit, shards, chunks, budget, expected) -> None:
    assert read_block_shape(shape, 2, unit, shards, chunks, budget) == expected


def _brute_cost(shape, itemsize, unit, block):
    reads = 0
    nbytes = 0
    ranges = [range(0, n, b) for n, b in zip(shape, block, strict=True)]
    for corner in itertools.product(*ranges):
        units = [
            range(c // u, (min(n, c + b) - 1) // u + 1)
            for c, b, u, n in zip(corner, block, unit, shape, strict=True)
        ]
        for k in itertools.product(*units):
            reads += 1
            nbytes += (
                math.prod(
                    min(n, (i + 1) * u) - i * u for i, u, n in zip(k, unit, shape, strict=True)
                )
                * itemsize
            )
    return reads, nbytes


dims = st.tuples(st.integers(1, 30), st.integers(1, 12), st.integers(1, 12))


@given(st.lists(dims, min_size=1, max_size=3))
def test_read_cost_matches_brute_force(axes) -> None:
    shape = tuple(a[0] for a in axes)
    unit = tuple(a[1] for a in axes)
    block = tuple(a[2] for a in axes)
    cost = read_cost(shape, 4, unit, block)
    assert (cost.reads, cost.nbytes_read) == _brute_cost(shape, 4, unit, block)
    assert cost.nbytes_source == math.prod(shape) * 4
    assert cost.amplification >= 1.0


@given(
    st.lists(
        st.tuples(st.integers(1, 600), st.integers(1, 64), st.integers(1, 4), st.integers(1, 4)),
        min_size=1,
        max_size=3,
    ),
    st.integers(1, 1 << 22),
)
def test_aligned_blocks_read_each_unit_once(axes, budget) -> None:
    """Where the budget allows blocks of whole units, no unit is read twice."""
    shape = tuple(a[0] for a in axes)
    unit = tuple(a[1] for a in axes)
    chunks = tuple(a[2] for a in axes)
    shards = tuple(a[2] * a[3] for a in axes)
    block = read_block_shape(shape, 1, unit, shards, chunks, budget)
    assert all(1 <= b <= n for b, n in zip(block, shape, strict=True))
    if math.prod(min(u, n) for u, n in zip(unit, shape, strict=True)) <= budget:
        assert math.prod(block) <= budget or all(b <= u for b, u in zip(block, unit, strict=True))
        aligned = all(b % u == 0 or b == n for b, u, n in zip(block, unit, shape, strict=True))
        if aligned:
            assert read_cost(shape, 1, unit, block).amplification == 1.0


@pytest.mark.parametrize(
    ("block", "shard", "chunk", "expected"),
    [
        ((32, 1024, 1024), (256, 256, 256), (64, 64, 64), True),  # thinner than a chunk
        ((64, 1024, 1024), (256, 256, 256), (64, 64, 64), False),  # whole chunks
        ((300, 300), (256, 256), (64, 64), False),  # one block per shard along both
        ((100, 100), (256, 256), (64, 64), True),
    ],
)
def test_straddles_table(block, shard, chunk, expected) -> None:
    assert straddles(block, shard, chunk) is expected


@given(
    st.lists(
        st.tuples(st.integers(1, 8), st.integers(1, 6), st.integers(1, 6), st.integers(1, 64)),
        min_size=1,
        max_size=3,
    ),
    st.integers(1, 1 << 16),
    st.lists(st.booleans(), min_size=3, max_size=3),
)
def test_intermediate_chunks_fit_both_passes(axes, max_nbytes, spans) -> None:
    chunk = tuple(a[0] for a in axes)
    shard = tuple(a[0] * a[1] for a in axes)
    block = tuple(a[3] if a[2] % 2 else a[0] * a[2] for a in axes)  # some whole, some not
    # along some axes one block spans the array (its end is the array's), along others not
    shape = tuple(b if whole else b * 3 + 1 for b, whole in zip(block, spans, strict=False))
    inter = intermediate_chunks(shape, block, shard, chunk, 2, max_nbytes)
    for n, b, c, i in zip(shape, block, chunk, inter, strict=True):
        assert b >= n or b % i == 0  # pass 1: every block is whole intermediate chunks
        # pass 2: inner-chunk-aligned blocks hold whole ones (or read the axis whole)
        assert c % i == 0 or i % c == 0 or c >= n
    base = [
        c if b >= n or b % c == 0 else math.gcd(b, c)
        for n, b, c in zip(shape, block, chunk, strict=True)
    ]
    assert all(i >= k for i, k in zip(inter, base, strict=True))  # never below the base
    assert math.prod(inter) * 2 <= max(max_nbytes, math.prod(base) * 2)


@pytest.mark.parametrize(
    ("shape", "block", "expected"),
    [
        # camera frames: one block spans y and x, whose extents are no multiple of 64
        ((200, 700, 600), (16, 700, 600), (16, 128, 256)),
        ((200, 1000, 1000), (8, 1000, 1000), (8, 256, 256)),
        # blocks meet along y: the common divisor there
        ((200, 1400, 600), (16, 700, 600), (16, 4, 256)),
    ],
)
def test_intermediate_chunks_table(shape, block, expected) -> None:
    inter = intermediate_chunks(shape, block, (128, 256, 256), (64, 64, 64), 2, 1 << 20)
    assert inter == expected


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        # pass 2 reads all 730 time steps: any divisor of the block is aligned, not only
        # those it shares with 730 (gcd(32, 730) = 2 made copies of 130 KiB chunks)
        ((32, 256, 512), (32, 64, 128)),
        ((45, 256, 512), (45, 64, 64)),
        ((73, 256, 512), (73, 32, 64)),
        ((10, 256, 512), (10, 64, 128)),
    ],
)
def test_intermediate_chunks_of_a_time_series(block, expected) -> None:
    shape, shard, chunk = (730, 256, 512), (730, 128, 128), (730, 32, 32)
    inter = intermediate_chunks(shape, block, shard, chunk, 4, 1 << 20, block_nbytes=30 << 20)
    assert inter == expected


@given(
    st.integers(2, 400),
    st.integers(1, 399),
    st.integers(1, 16),
    st.integers(1 << 8, 1 << 16),
)
def test_intermediate_chunks_along_an_axis_an_inner_chunk_spans(n, block, other, max_nbytes):
    block = min(block, n - 1)
    inter = intermediate_chunks((n, other), (block, other), (n, other), (n, other), 1, max_nbytes)
    assert block % inter[0] == 0  # pass 1: every block is whole intermediate chunks
    # the largest such extent within max_nbytes (at least the common divisor)
    fitting = [k for k in range(1, block + 1) if block % k == 0 and k * other <= max_nbytes]
    assert inter[0] == max([math.gcd(block, n), *fitting])


@given(st.integers(0, 400), st.integers(1, 410), st.integers(1, 410))
def test_axis_reads_count_what_each_block_reads(n: int, unit: int, block: int) -> None:
    """The closed form against a walk over the blocks, each unit counted whole."""
    touched = extent = 0
    for start in range(0, n, block):
        for k in range(start // unit, (min(n, start + block) - 1) // unit + 1):
            touched += 1
            extent += min(n, (k + 1) * unit) - k * unit
    assert axis_reads(n, unit, block) == (touched, extent)


def test_axis_reads_of_a_long_axis_take_no_step_per_block() -> None:
    assert axis_reads(10**12, 7, 3) == (428_571_428_572, 2_999_999_999_998)
    # blocks of one step in one unit of the whole axis: each block reads the unit whole
    assert axis_reads(10**18, 10**18, 1) == (10**18, 10**36)
