"""Downsampling blocks: the mean and the mode against a window-by-window brute force."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from shardpipe.core.downsample import downsample_block


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


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(["uint8", "uint16", "uint64", "float32"]),
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
        else st.integers(0, 5 if method == "mode" else np.iinfo(dtype).max)
    )
    block = data.draw(hnp.arrays(dtype, shape, elements=elements))
    got = downsample_block(block, factor, method)
    expected = _brute(block, factor, method)
    if dtype == "float32" and method == "mean":
        np.testing.assert_allclose(got, expected, rtol=1e-6)
    else:
        np.testing.assert_array_equal(got, expected, strict=True)
