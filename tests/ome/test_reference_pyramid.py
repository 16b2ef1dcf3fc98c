"""The reference pyramid's whole-axis paths compute what its window-by-window loop does."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from tests.support.ome_checks import reference_level, window_by_window

DTYPES = ["uint8", "int8", "uint16", "int16", "uint32", "int32"]


@st.composite
def cases(draw: st.DrawFn) -> tuple[np.ndarray, tuple[int, ...]]:
    ndim = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 9), min_size=ndim, max_size=ndim)))
    step = tuple(draw(st.lists(st.integers(1, 5), min_size=ndim, max_size=ndim)))
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    info = np.iinfo(dtype)
    seed = draw(st.integers(0, 2**32 - 1))
    data = np.random.default_rng(seed).integers(info.min, int(info.max) + 1, shape, dtype=dtype)
    return data, step


@given(cases(), st.sampled_from(["mean", "nearest"]))
def test_the_fast_paths_agree_with_the_loop(
    case: tuple[np.ndarray, tuple[int, ...]], method: str
) -> None:
    data, step = case
    fast = reference_level(data, step, method)
    slow = window_by_window(data, step, method)
    assert fast.dtype == slow.dtype
    np.testing.assert_array_equal(fast, slow)


def test_extreme_values_round_half_to_even() -> None:
    """Sums far beyond the dtype, and exact halves rounded to the even neighbour."""
    data = np.array([[65535, 65535, 65534, 65535], [0, 1, 2, 3]], dtype="uint16")
    np.testing.assert_array_equal(
        reference_level(data, (1, 2), "mean"), np.array([[65535, 65534], [0, 2]], dtype="uint16")
    )
    np.testing.assert_array_equal(
        reference_level(data, (1, 2), "mean"), window_by_window(data, (1, 2), "mean")
    )
