"""A deterministic synthetic volume generated block by block inside a Dask graph.

The value at ``(z, y, x)`` depends only on the volume shape, the dtype, the
seed and the coordinates, never on how the volume is cut into blocks, so the
same array can be built with any Dask chunking, and any region of it can be
recomputed later to check what was written. No block is ever larger than the
Dask block that asks for it: the volume is never held in memory whole.

Each plane is a smooth 2-D field that drifts slowly with ``z`` (a shifted
view of one precomputed table), plus a per-plane offset, plus noise in the
low bits taken from a seeded random table at a per-plane pseudo-random
shift. Building a plane costs two in-place additions, so generation stays
cheap next to encoding.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

NOISE_PERIOD = (1031, 1033)
"""Period (rows, columns) of the noise table; primes, so shifts do not align."""

DRIFT = (3, 5)
"""The smooth field moves one row every 3 planes and one column every 5."""


@dataclass(frozen=True)
class Tables:
    """Precomputed pieces of a synthetic volume (a few MiB for a 1 GiB volume).

    Parameters
    ----------
    smooth : numpy.ndarray
        2-D smooth field, large enough for every plane's drifted window.
    noise : numpy.ndarray
        2-D noise table, periodic with ``NOISE_PERIOD``, large enough for any
        shift plus a full plane.
    offset : numpy.ndarray
        Per-plane offset added to the whole plane.
    shift : numpy.ndarray
        Per-plane ``(row, column)`` shift into the noise table.
    """

    smooth: np.ndarray
    noise: np.ndarray
    offset: np.ndarray
    shift: np.ndarray


@functools.lru_cache(maxsize=4)
def tables(shape: tuple[int, int, int], dtype: str, seed: int) -> Tables:
    """Build (once per process) the tables of a synthetic volume.

    Parameters
    ----------
    shape : tuple of int
        Volume shape ``(z, y, x)``.
    dtype : str
        Unsigned integer dtype, e.g. ``"uint8"`` or ``"<u2"``.
    seed : int
        Seed of the noise and of the per-plane shifts.

    Returns
    -------
    Tables
        The tables; values are already in ``dtype`` and never overflow when
        added (smooth up to 80 %, offset up to 10 %, noise in the low bits).
    """
    nz, ny, nx = shape
    dt = np.dtype(dtype)
    top = float(np.iinfo(dt).max)
    rows = ny + nz // DRIFT[0] + 1
    cols = nx + nz // DRIFT[1] + 1
    v = np.arange(rows, dtype=np.float32)[:, None] / np.float32(max(ny, 1))
    w = np.arange(cols, dtype=np.float32)[None, :] / np.float32(max(nx, 1))
    two_pi = np.float32(2 * np.pi)
    field = np.sin(two_pi * (1.3 * v + 0.1)) * np.cos(two_pi * (1.7 * w + 0.3))
    field += 0.5 * np.sin(two_pi * (0.6 * w + 1.1 * v))
    field = (field + 1.5) / 3.0  # into [0, 1]
    smooth = (field * np.float32(0.8 * top)).astype(dt)

    rng = np.random.default_rng([seed, 1])
    mask = 3 if dt.itemsize == 1 else 7
    period = rng.integers(0, mask + 1, size=NOISE_PERIOD, dtype=dt)
    reps = (
        -(-(NOISE_PERIOD[0] + ny) // NOISE_PERIOD[0]),
        -(-(NOISE_PERIOD[1] + nx) // NOISE_PERIOD[1]),
    )
    noise = np.tile(period, reps)[: NOISE_PERIOD[0] + ny, : NOISE_PERIOD[1] + nx].copy()

    z = np.arange(nz, dtype=np.float64)
    offset = ((np.sin(2 * np.pi * z / max(nz, 1) * 1.5) + 1) * 0.05 * top).astype(dt)
    shift = np.stack([rng.integers(0, p, size=nz) for p in NOISE_PERIOD], axis=1)
    return Tables(smooth, noise, offset, shift)


def region_values(
    shape: tuple[int, int, int], dtype: str, seed: int, region: tuple[slice, ...]
) -> np.ndarray:
    """Compute the values of one region of the synthetic volume.

    Parameters
    ----------
    shape : tuple of int
        Volume shape ``(z, y, x)``.
    dtype : str
        Unsigned integer dtype.
    seed : int
        Seed.
    region : tuple of slice
        Region with explicit, in-bounds ``start`` and ``stop`` (step 1).

    Returns
    -------
    numpy.ndarray
        C-contiguous array of the region.
    """
    t = tables(shape, dtype, seed)
    (z0, z1), (y0, y1), (x0, x1) = ((s.start, s.stop) for s in region)
    out = np.empty((z1 - z0, y1 - y0, x1 - x0), dtype=t.smooth.dtype)
    for k, z in enumerate(range(z0, z1)):
        dy, dx = z // DRIFT[0], z // DRIFT[1]
        ry, rx = t.shift[z]
        plane = out[k]
        np.add(t.smooth[dy + y0 : dy + y1, dx + x0 : dx + x1], t.offset[z], out=plane)
        plane += t.noise[ry + y0 : ry + y1, rx + x0 : rx + x1]
    return out


def _block(
    shape: tuple[int, int, int], dtype: str, seed: int, block_info: Any = None
) -> np.ndarray:
    """``map_blocks`` callback: compute the block at ``block_info[None]["array-location"]``."""
    location = block_info[None]["array-location"]
    return region_values(shape, dtype, seed, tuple(slice(a, b) for a, b in location))


def synthetic_array(
    shape: tuple[int, int, int], dtype: str, blocks: tuple[int, ...], seed: int = 0
) -> Any:
    """Return the synthetic volume as a lazy Dask array.

    Parameters
    ----------
    shape : tuple of int
        Volume shape ``(z, y, x)``.
    dtype : str
        Unsigned integer dtype.
    blocks : tuple of int
        Dask block shape.
    seed : int, optional
        Seed.

    Returns
    -------
    dask.array.Array
        Array whose blocks are computed by :func:`region_values` when needed.
    """
    import dask.array as da

    chunks = da.core.normalize_chunks(blocks, shape=shape, dtype=dtype)
    return da.map_blocks(
        functools.partial(_block, tuple(shape), str(dtype), seed),
        chunks=chunks,
        dtype=dtype,
        meta=np.empty((0, 0, 0), dtype=dtype),
        token="synthetic",
    )
