"""Downsampling blocks: the mean and the mode against a window-by-window brute force."""

from __future__ import annotations

import itertools
from collections import Counter
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from shardpipe.core import downsample
from shardpipe.core.downsample import downsample_block
from tests.support.examples import scaled


def _brute(block: np.ndarray, factor: tuple[int, ...], method: str) -> np.ndarray:
    out_shape = tuple(-(-n // f) for n, f in zip(block.shape[:3], factor, strict=True))
    out = np.zeros((*out_shape, block.shape[3]), dtype=block.dtype)
    for index in itertools.product(*(range(n) for n in out_shape)):
        window = block[tuple(slice(i * f, (i + 1) * f) for i, f in zip(index, factor, strict=True))]
        for c in range(block.shape[3]):
            values = window[..., c].reshape(-1)
            if method == "mean" and block.dtype.kind in "iu":
                quotient, remainder = divmod(sum(int(v) for v in values), len(values))
                half = 2 * remainder
                up = half > len(values) or (half == len(values) and quotient % 2 == 1)
                out[(*index, c)] = quotient + up  # exact, halves to even
            elif method == "mean":
                out[(*index, c)] = values.astype(np.float64).mean()
            else:
                counts = Counter(values.tolist())
                best = max(counts.values())
                out[(*index, c)] = min(v for v, n in counts.items() if n == best)
    return out


@settings(max_examples=scaled(60), deadline=None)
@given(
    st.sampled_from(["uint8", "int8", "uint16", "int32", "uint64", "int64", "float32"]),
    st.tuples(st.integers(1, 9), st.integers(1, 9), st.integers(1, 5), st.integers(1, 3)),
    st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 2)),
    st.sampled_from(["mean", "mode"]),
    st.data(),
)
def test_matches_the_brute_force(
    dtype: str, shape: tuple[int, ...], factor: tuple[int, ...], method: str, data: st.DataObject
) -> None:
    elements = (
        st.floats(-1e3, 1e3, width=32)
        if dtype == "float32"
        else st.integers(
            np.iinfo(dtype).min if method == "mean" else 0,
            5 if method == "mode" else np.iinfo(dtype).max,
        )
    )
    block = data.draw(hnp.arrays(dtype, shape, elements=elements))
    got = downsample_block(block, factor, method)
    expected = _brute(block, factor, method)
    if dtype == "float32" and method == "mean":
        np.testing.assert_allclose(got, expected, rtol=1e-6)
    else:
        np.testing.assert_array_equal(got, expected, strict=True)


# -- every dtype at its extremes, on every seed (explicit tables, not hypothesis' luck) --------
INTEGER_DTYPES = ["uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64"]
FLOAT_DTYPES = ["float32", "float64"]


def _extremes(dtype: str) -> list[Any]:
    """The values that break sums: the ends of the range, their neighbours, 0, 2**63."""
    if dtype in FLOAT_DTYPES:
        info = np.finfo(dtype)
        return [info.max, info.min, -info.tiny, info.tiny, 0.0, 1.5, np.inf, -np.inf, np.nan]
    info = np.iinfo(dtype)
    values = {info.min, info.min + 1, info.max, info.max - 1, 0, 1, info.max // 2 + 1}
    if dtype == "uint64":
        values |= {2**63, 2**63 - 1, 2**63 + 1}
    return sorted(values)


def _exact_float_mean(values: np.ndarray) -> float:
    """The mean of floats in exact arithmetic (NaN and infinities as IEEE has them)."""
    finite = values[np.isfinite(values)]
    if np.isnan(values).any() or (np.isposinf(values).any() and np.isneginf(values).any()):
        return float("nan")
    if np.isinf(values).any():
        return float(values[np.isinf(values)][0])
    total = sum((Fraction(float(v)) for v in finite), Fraction(0))
    return float(total / len(values))


def _oracle(block: np.ndarray, factor: tuple[int, ...]) -> np.ndarray:
    """The mean of every window, exact (integers rounded half to even)."""
    out_shape = tuple(-(-n // f) for n, f in zip(block.shape[:3], factor, strict=True))
    out = np.zeros((*out_shape, block.shape[3]), dtype=block.dtype)
    for index in itertools.product(*(range(n) for n in out_shape)):
        window = block[tuple(slice(i * f, (i + 1) * f) for i, f in zip(index, factor, strict=True))]
        for c in range(block.shape[3]):
            values = window[..., c].reshape(-1)
            if block.dtype.kind == "f":
                out[(*index, c)] = _exact_float_mean(values)
                continue
            quotient, remainder = divmod(sum(int(v) for v in values), len(values))
            up = 2 * remainder > len(values) or (2 * remainder == len(values) and quotient % 2)
            out[(*index, c)] = quotient + up
    return out


SHAPES = [(4, 4, 2, 1), (5, 3, 3, 2), (2, 2, 2, 1)]  # whole windows, partial windows
FACTORS = [(2, 2, 2), (3, 1, 2), (2, 2, 1)]


@pytest.mark.parametrize("factor", FACTORS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", INTEGER_DTYPES + FLOAT_DTYPES)
def test_the_mean_at_the_extremes_of_every_dtype(
    dtype: str, shape: tuple[int, ...], factor: tuple[int, ...]
) -> None:
    values = _extremes(dtype)
    rng = np.random.default_rng(28)
    blocks = [np.full(shape, v, dtype=dtype) for v in values]  # uniform: the mean is the value
    blocks += [rng.choice(np.array(values, dtype=dtype), size=shape) for _ in range(4)]
    for block in blocks:
        with np.errstate(invalid="ignore", over="ignore"):
            got = downsample_block(block, factor, "mean")
        expected = _oracle(block, factor)
        assert got.dtype == block.dtype
        if dtype in FLOAT_DTYPES:  # summed in float64: cancellation costs up to ~k ulps of
            finite = np.abs(block[np.isfinite(block)])  # the largest value
            atol = float(finite.max(initial=0.0)) * 1e-14
            rtol = 1e-6 if dtype == "float32" else 1e-12
            np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(got, expected, strict=True)


@pytest.mark.parametrize("dtype", INTEGER_DTYPES)
def test_the_mode_at_the_extremes_of_every_dtype(dtype: str) -> None:
    values = np.array(_extremes(dtype), dtype=dtype)
    block = np.random.default_rng(32).choice(values, size=(5, 4, 3, 2))
    got = downsample_block(block, (2, 2, 2), "mode")
    np.testing.assert_array_equal(got, _brute(block, (2, 2, 2), "mode"), strict=True)


def test_a_window_larger_than_any_integer_sum_type() -> None:
    """A window of 2**33 uint32 values sums past 64 bits: still exact, not an error."""
    block = np.full((1, 1, 1, 1), 2**32 - 1, dtype="uint32")
    factor = (2**11, 2**11, 2**11)
    np.testing.assert_array_equal(downsample_block(block, factor, "mean"), block)


def _brute_nd(block: np.ndarray, factor: tuple[int, ...], method: str) -> np.ndarray:
    """Any number of dimensions; ``factor`` for the leading ones, window by window."""
    full = factor + (1,) * (block.ndim - len(factor))
    out_shape = tuple(-(-n // f) for n, f in zip(block.shape, full, strict=True))
    out = np.zeros(out_shape, dtype=block.dtype)
    for index in itertools.product(*(range(n) for n in out_shape)):
        window = block[tuple(slice(i * f, (i + 1) * f) for i, f in zip(index, full, strict=True))]
        values = window.reshape(-1)
        if method == "nearest":
            out[index] = values[0]
        elif method == "mode":
            counts = Counter(values.tolist())
            best = max(counts.values())
            out[index] = min(v for v, n in counts.items() if n == best)
        else:
            quotient, remainder = divmod(sum(int(v) for v in values), len(values))
            up = 2 * remainder > len(values) or (2 * remainder == len(values) and quotient % 2 == 1)
            out[index] = quotient + up
    return out


@settings(max_examples=scaled(60), deadline=None)
@given(
    st.sampled_from(["uint8", "int16", "uint32", "int64"]),
    st.lists(st.integers(1, 7), min_size=1, max_size=5),
    st.data(),
    st.sampled_from(["mean", "mode", "nearest"]),
)
def test_any_number_of_dimensions_matches_the_brute_force(
    dtype: str, shape: list[int], data: st.DataObject, method: str
) -> None:
    factor = data.draw(st.lists(st.integers(1, 3), min_size=1, max_size=len(shape)))
    info = np.iinfo(dtype)
    elements = st.integers(0, 4) if method == "mode" else st.integers(info.min, info.max)
    block = data.draw(hnp.arrays(dtype, tuple(shape), elements=elements))
    got = downsample_block(block, tuple(factor), method)
    np.testing.assert_array_equal(got, _brute_nd(block, tuple(factor), method), strict=True)


def test_nearest_keeps_the_first_voxel_of_each_window_and_copies() -> None:
    block = np.arange(5 * 7, dtype="uint32").reshape(5, 7)
    got = downsample_block(block, (2, 3), "nearest")
    np.testing.assert_array_equal(got, block[::2, ::3])
    assert got.base is None  # a copy: the block can be freed


@settings(max_examples=scaled(40), deadline=None)
@given(
    st.sampled_from(["uint8", "int16", "uint32", "int64"]),
    st.tuples(st.integers(1, 9), st.integers(1, 9), st.integers(1, 7)),
    st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 3)),
    st.sampled_from(["mean", "mode"]),
    st.integers(1, 200),
)
def test_a_block_taken_in_slabs_gives_what_it_gives_whole(
    dtype: str, shape: tuple[int, ...], factor: tuple[int, ...], method: str, slab: int
) -> None:
    info = np.iinfo(dtype)
    rng = np.random.default_rng(sum(shape))
    if method == "mean":
        block = rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    else:
        block = rng.integers(0, 4, shape).astype(dtype)
    whole = downsample_block(block, factor, method)
    before = downsample.SLAB_NBYTES
    downsample.SLAB_NBYTES = slab  # slabs of a few windows, the last one partial
    try:
        sliced = downsample_block(block, factor, method)
    finally:
        downsample.SLAB_NBYTES = before
    np.testing.assert_array_equal(sliced, whole, strict=True)
