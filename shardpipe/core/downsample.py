"""Downsampling a block by integer factors: the mean (images) and the mode (segmentations).

Pure NumPy. A block is ``(x, y, z, channel)``; ``factor`` has one entry per
spatial dimension. A block whose size is not a multiple of the factor (the
volume's end) gives partial windows: the mean and the mode are taken over
the voxels a window has, so the output has ``ceil(size / factor)`` voxels.

* ``mean``: the average of the window; integers are rounded to the nearest
  value (halves to even; 64-bit integers in exact arithmetic), floats
  computed in float64, then cast.
* ``mode``: the most frequent value of the window; ties go to the smallest
  value (the order is fixed, so every block of a volume agrees).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

METHODS = ("mean", "mode")


def _windows(
    block: np.ndarray, factor: Sequence[int]
) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
    """``(values, valid, out_shape)``: each output voxel's window as a row of ``prod(factor)``."""
    spatial = block.shape[:3]
    out = tuple(-(-n // f) for n, f in zip(spatial, factor, strict=True))
    padded_shape = tuple(o * f for o, f in zip(out, factor, strict=True))
    pad = [(0, p - n) for p, n in zip(padded_shape, spatial, strict=True)] + [(0, 0)]
    values = np.pad(block, pad)
    valid = np.pad(np.ones(spatial, dtype=bool), pad[:3])
    channels = block.shape[3]
    shape = (out[0], factor[0], out[1], factor[1], out[2], factor[2])
    values = values.reshape(*shape, channels).transpose(0, 2, 4, 6, 1, 3, 5)
    valid = valid.reshape(shape).transpose(0, 2, 4, 1, 3, 5)
    k = math.prod(factor)
    rows = values.reshape(-1, channels, k)
    mask = np.broadcast_to(valid.reshape(-1, 1, k), rows.shape)
    return rows, mask, (*out, channels)


def downsample_block(block: np.ndarray, factor: Sequence[int], method: str) -> np.ndarray:
    """Downsample an ``(x, y, z, channel)`` block by ``factor`` with ``method``."""
    if all(f == 1 for f in factor):
        return block
    fits = all(n % f == 0 for n, f in zip(block.shape[:3], factor, strict=True))
    if method == "mean" and fits and not (block.dtype.kind in "iu" and block.dtype.itemsize == 8):
        return _whole_window_mean(block, factor)
    rows, valid, out_shape = _windows(block, factor)
    if method == "mean":
        count = valid.sum(axis=-1)
        if block.dtype.kind in "iu" and block.dtype.itemsize == 8:
            out: np.ndarray = _exact_mean(rows, valid, count).astype(block.dtype)
        else:
            mean = np.where(valid, rows, 0).sum(axis=-1, dtype=np.float64) / count
            out = (np.rint(mean) if block.dtype.kind in "iu" else mean).astype(block.dtype)
        return out.reshape(out_shape)
    if method == "mode":
        return _mode(rows, valid).reshape(out_shape)
    raise ValueError(f"unknown downsampling method {method!r}; use one of {METHODS}")


def _whole_window_mean(block: np.ndarray, factor: Sequence[int]) -> np.ndarray:
    """The mean where every window is whole: strided sums axis by axis, no padded copy.

    Integers are summed in a wider integer type and rounded half to even in
    integer arithmetic (exact); floats in float64. Summing the strided
    slices of one axis at a time is 4-6x faster than one reduction over a
    reshaped 7-D view (measured on 300^3 uint8 blocks).
    """
    integer = block.dtype.kind in "iu"
    k = math.prod(factor)
    wide: np.dtype[Any] = np.dtype(np.float64)
    if integer:  # the smallest integer type that holds a window's sum
        bits = 8 * block.dtype.itemsize + max(k - 1, 1).bit_length()
        size = next(n for n in (16, 32, 64) if bits <= n)
        wide = np.dtype(f"{'u' if block.dtype.kind == 'u' else 'i'}{size // 8}")
    total: np.ndarray = block
    for axis, f in enumerate(factor):
        if f == 1:
            continue
        index: list[slice] = [slice(None)] * block.ndim
        summed: np.ndarray | None = None
        for offset in range(f):
            index[axis] = slice(offset, None, f)
            part = total[tuple(index)]
            summed = part.astype(wide) if summed is None else summed + part
        assert summed is not None
        total = summed
    if total is block:
        total = block.astype(wide)
    if not integer:
        out: np.ndarray = (total / k).astype(block.dtype)
        return out
    quotient, remainder = np.divmod(total, k)
    up = (2 * remainder > k) | ((2 * remainder == k) & (quotient % 2 == 1))
    out = (quotient + up).astype(block.dtype)
    return out


def _exact_mean(rows: np.ndarray, valid: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Means of 64-bit integers, rounded half to even, in exact (Python integer) arithmetic.

    A float64 sum would lose their low bits, and a mean rounded up to 2**64
    would not fit the dtype.
    """
    totals = np.where(valid, rows, 0).astype(object).sum(axis=-1)
    out = np.empty(totals.shape, dtype=object)
    for position, (total, n) in enumerate(zip(totals.flat, count.flat, strict=True)):
        quotient, remainder = divmod(int(total), int(n))
        up = 2 * remainder > n or (2 * remainder == n and quotient % 2 == 1)
        out.flat[position] = quotient + up
    return out


def _mode(rows: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Most frequent valid value of each row (ties: the smallest)."""
    order = np.lexsort((rows, ~valid), axis=-1)  # valid first, then by value
    values = np.take_along_axis(rows, order, axis=-1)
    ok = np.take_along_axis(valid, order, axis=-1)
    best = values[..., 0].copy()
    best_count = np.zeros(best.shape, dtype=np.int64)
    run = np.zeros(best.shape, dtype=np.int64)
    for i in range(values.shape[-1]):
        same = values[..., i] == values[..., i - 1] if i else np.zeros(best.shape, dtype=bool)
        run = np.where(same, run + 1, 1)
        better = ok[..., i] & (run > best_count)
        best = np.where(better, values[..., i], best)
        best_count = np.where(better, run, best_count)
    return best
