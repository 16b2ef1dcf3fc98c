"""Tests of byte-size parsing and default shapes in ``shardpipe.core.sizes``."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardpipe.core.sizes import (
    DEFAULT_CHUNK_NBYTES,
    DEFAULT_SHARD_NBYTES,
    default_chunk_shape,
    default_chunk_shape_within,
    default_shard_shape,
    parse_bytes,
    shard_multiple_block,
)
from tests.support.examples import scaled

SETTINGS = settings(max_examples=scaled(100), deadline=None)
MiB = 1 << 20

shapes = st.lists(
    st.one_of(st.integers(1, 40), st.integers(1, 100_000)), min_size=1, max_size=4
).map(tuple)
itemsizes = st.sampled_from([1, 2, 4, 8])


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1, 1),
        (2_000_000, 2_000_000),
        (10**12, 10**12),
        ("1", 1),
        (" 7 ", 7),
        ("10 B", 10),
        ("2GB", 2 * 10**9),
        ("2gb", 2 * 10**9),
        ("256MB", 256 * 10**6),
        ("1.5 GiB", 3 * 2**29),
        ("512 KiB", 512 * 1024),
        ("64MiB", 64 * MiB),
        ("1 TiB", 2**40),
        ("3 TB", 3 * 10**12),
        (".5kB", 500),
        ("0.25 kib", 256),
    ],
)
def test_parse_bytes_table(value: int | str, expected: int) -> None:
    assert parse_bytes(value) == expected


@pytest.mark.parametrize(("value", "expected"), [("4.1MB", 4_100_000), ("2.01kB", 2010)])
def test_parse_bytes_decimal_fractions_are_exact(value: str, expected: int) -> None:
    # "4.1MB" is exactly 4,100,000 bytes; float rounding must not make it one byte less.
    assert parse_bytes(value) == expected


@pytest.mark.parametrize(
    "value",
    ["", "   ", "-1", "abc", "GB", "1.2.3", "5 XB", "1e3", "0", "0 GB", "0.4", 0, -5, True, False],
)
def test_parse_bytes_rejects(value: object) -> None:
    with pytest.raises(ValueError):
        parse_bytes(value)  # type: ignore[arg-type]


@given(st.integers(1, 10**15))
@settings(max_examples=scaled(50), deadline=None)
def test_parse_bytes_integers_and_their_strings(n: int) -> None:
    assert parse_bytes(n) == n
    assert parse_bytes(str(n)) == n
    assert parse_bytes(f"{n}B") == n


@pytest.mark.parametrize(
    ("shape", "itemsize", "expected"),
    [
        ((1000, 1000, 1000), 1, (64, 128, 128)),
        ((512, 1024, 1024), 2, (64, 64, 128)),
        ((2**22,), 4, (2**18,)),
        ((10, 10), 1, (10, 10)),
        ((100_000, 3), 8, (32768, 3)),
    ],
)
def test_default_chunk_shape_table(shape, itemsize, expected) -> None:
    assert default_chunk_shape(shape, itemsize) == expected


@given(shapes, itemsizes, st.sampled_from([2**10, 2**14, DEFAULT_CHUNK_NBYTES]))
@SETTINGS
def test_default_chunk_shape_is_about_target(shape, itemsize: int, target: int) -> None:
    chunk = default_chunk_shape(shape, itemsize, target)
    assert len(chunk) == len(shape)
    assert all(1 <= c <= n for c, n in zip(chunk, shape, strict=True))
    nbytes = math.prod(chunk) * itemsize
    array_nbytes = math.prod(shape) * itemsize
    assert nbytes <= max(target, itemsize)
    assert 2 * nbytes >= min(target, array_nbytes)


def test_default_chunk_shape_default_target() -> None:
    chunk = default_chunk_shape((4096, 4096), 4)
    assert math.prod(chunk) * 4 == DEFAULT_CHUNK_NBYTES == MiB


@pytest.mark.parametrize(
    ("shape", "chunk", "itemsize", "expected"),
    [
        ((512, 1024, 1024), (64, 64, 128), 2, (256, 512, 1024)),
        ((100, 100), (64, 64), 1, (128, 128)),
        ((10,), (4,), 8, (12,)),
    ],
)
def test_default_shard_shape_table(shape, chunk, itemsize, expected) -> None:
    assert default_shard_shape(shape, chunk, itemsize) == expected


@given(shapes, itemsizes, st.sampled_from([2**10, 2**14, DEFAULT_CHUNK_NBYTES]))
@SETTINGS
def test_default_shard_shape_is_whole_chunks_of_about_target(shape, itemsize, chunk_target) -> None:
    target = 256 * chunk_target
    chunk = default_chunk_shape(shape, itemsize, chunk_target)
    shard = default_shard_shape(shape, chunk, itemsize, target)
    assert len(shard) == len(shape)
    assert all(s >= c and s % c == 0 for s, c in zip(shard, chunk, strict=True))
    covering = tuple(-(-n // c) * c for n, c in zip(shape, chunk, strict=True))
    assert all(s <= n for s, n in zip(shard, covering, strict=True))
    nbytes = math.prod(shard) * itemsize
    covering_nbytes = math.prod(covering) * itemsize
    assert nbytes <= max(target, math.prod(chunk) * itemsize)
    assert 2 * nbytes >= min(target, covering_nbytes)


def test_default_shard_shape_default_target() -> None:
    shard = default_shard_shape((8192, 8192, 8), (256, 256, 4), 4)
    assert math.prod(shard) * 4 == DEFAULT_SHARD_NBYTES


def test_default_shard_shape_for_chunks_above_target_is_one_chunk() -> None:
    assert default_shard_shape((1000,), (100,), 8, target=10) == (100,)


@given(
    st.lists(st.integers(1, 5000), min_size=1, max_size=4).map(tuple),
    itemsizes,
    st.sampled_from([2**10, 2**14, DEFAULT_CHUNK_NBYTES]),
)
@SETTINGS
def test_default_chunk_shape_within_divides_the_shard(shard, itemsize, target) -> None:
    chunk = default_chunk_shape_within(shard, itemsize, target)
    assert len(chunk) == len(shard)
    assert all(1 <= c <= s and s % c == 0 for c, s in zip(chunk, shard, strict=True))
    # "about target": the nearest divisor per dimension may overshoot, by at most 2x per side
    assert math.prod(chunk) * itemsize <= max(target, itemsize) * 2 ** len(shard)


@pytest.mark.parametrize(
    ("shard", "itemsize", "expected"),
    [
        ((256, 256, 256), 1, (64, 128, 128)),
        ((1000, 1000, 1000), 1, (50, 125, 125)),
        ((96, 96), 8, (96, 96)),
    ],
)
def test_default_chunk_shape_within_table(shard, itemsize, expected) -> None:
    assert default_chunk_shape_within(shard, itemsize) == expected


def test_default_chunk_shape_within_prime_shard_is_not_degenerate() -> None:
    # 1031 is prime; (1031, 1031) uint8 is ~1.01 MiB and divides the shard, yet the
    # "about 1 MiB" chunk must not collapse to a handful of bytes.
    chunk = default_chunk_shape_within((1031, 1031), 1)
    assert math.prod(chunk) >= DEFAULT_CHUNK_NBYTES // 4


def _growing_block(shape, unit, itemsize, budget):  # type: ignore[no-untyped-def]
    """The block of whole units grown one unit at a time (the oracle: slow, but plain)."""
    block = [min(u, n) for u, n in zip(unit, shape, strict=True)]
    for axis in reversed(range(len(shape))):
        while block[axis] < shape[axis]:
            wider = [*block]
            wider[axis] = min(block[axis] + unit[axis], shape[axis])
            if math.prod(wider) * itemsize > budget:
                break
            block = wider
    return tuple(block)


@SETTINGS
@given(
    st.lists(st.tuples(st.integers(0, 60), st.integers(1, 9)), min_size=1, max_size=4),
    itemsizes,
    st.integers(1, 4096),
)
def test_shard_multiple_block_grows_by_whole_units_within_the_budget(
    sizes: list[tuple[int, int]], itemsize: int, budget: int
) -> None:
    shape = tuple(n for n, _ in sizes)
    unit = tuple(u for _, u in sizes)
    assert shard_multiple_block(shape, unit, itemsize, budget) == _growing_block(
        shape, unit, itemsize, budget
    )
    assert shard_multiple_block(shape, unit, itemsize, None) == tuple(map(min, unit, shape))


@pytest.mark.timeout(60)
def test_shard_multiple_block_of_a_vast_grid_is_arithmetic() -> None:
    """Issue 39: a forged shape of 2**62 in shards of 1 grew the block one shard at a time
    (2**30 steps for max_mem="1GiB": over a minute); sizes are computed, never counted."""
    assert shard_multiple_block((2**62,), (1,), 1, 2**30) == (2**30,)
    assert shard_multiple_block((2**62, 2**62), (1, 3), 2, 2**40) == (1, 3 * (2**39 // 3))
    assert shard_multiple_block((2**40, 2**20), (1, 1), 1, 2**40) == (2**20, 2**20)
