"""Benchmark data: the array layout, the Dask block cases and the test volume.

The volume is a smooth ``uint16`` field (products and sums of low-frequency
sines plus a gradient) with a little uniform noise in the low three bits. It is
generated deterministically from a seed, plane-slab by plane-slab, so every
benchmark subprocess builds a bit-identical copy without large temporaries.
"""

from __future__ import annotations

import itertools
import math
import zlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

FULL_SHAPE: tuple[int, int, int] = (512, 1024, 1024)
"""Shape of the full-size benchmark volume (1 GiB of ``uint16``)."""

SMALL_SHAPE: tuple[int, int, int] = (256, 256, 512)
"""Shape used by ``--small`` (64 MiB, four shards) for smoke tests."""

SHARDS: tuple[int, int, int] = (128, 256, 256)
"""Shard shape (the Zarr v3 chunk-grid shape) of every written array."""

INNER_CHUNKS: tuple[int, int, int] = (64, 64, 64)
"""Inner chunk shape inside each shard."""

CODECS: tuple[str, ...] = ("zstd1", "none")
"""Codec settings: ``zstd1`` is bytes + zstd level 1, ``none`` is bytes only."""

BLOCK_CASES: tuple[str, ...] = ("aligned", "misaligned", "slabs")
"""Dask block cases used for the Dask-based writers."""

DTYPE = np.dtype("<u2")
NOISE_MASK = 0b111  # noise amplitude: uniform integers in [0, 7]
SLAB_PLANES = 8  # planes generated per slab


@dataclass(frozen=True)
class Layout:
    """Shape, shard shape and inner chunk shape of a benchmark array.

    Parameters
    ----------
    shape : tuple of int
        Shape of the whole array.
    shards : tuple of int
        Shard shape.
    chunks : tuple of int
        Inner chunk shape.
    """

    shape: tuple[int, ...]
    shards: tuple[int, ...] = SHARDS
    chunks: tuple[int, ...] = INNER_CHUNKS

    @property
    def dtype(self) -> np.dtype[np.uint16]:
        """Data type of the array (little-endian ``uint16``)."""
        return DTYPE

    @property
    def nbytes(self) -> int:
        """Number of raw, uncompressed bytes in the array."""
        return math.prod(self.shape) * DTYPE.itemsize

    @property
    def n_shards(self) -> int:
        """Number of shards in the shard grid."""
        return math.prod(-(-s // c) for s, c in zip(self.shape, self.shards, strict=True))

    def shard_slices(self) -> Iterator[tuple[slice, ...]]:
        """Yield the region of every shard, in C order.

        Yields
        ------
        tuple of slice
            Index of one shard, clipped to the array shape.
        """
        yield from _grid_slices(self.shape, self.shards)

    def chunk_slices(self, region: tuple[slice, ...]) -> Iterator[tuple[slice, ...]]:
        """Yield the inner chunks that lie within ``region`` (absolute indices).

        Parameters
        ----------
        region : tuple of slice
            A shard region as produced by :meth:`shard_slices`.

        Yields
        ------
        tuple of slice
            Absolute index of one inner chunk.
        """
        sub_shape = tuple(r.stop - r.start for r in region)
        for local in _grid_slices(sub_shape, self.chunks):
            yield tuple(
                slice(r.start + s.start, r.start + s.stop)
                for r, s in zip(region, local, strict=True)
            )


def _grid_slices(shape: tuple[int, ...], step: tuple[int, ...]) -> Iterator[tuple[slice, ...]]:
    """Yield regular grid cells of size ``step`` covering ``shape``."""
    ranges = [range(0, n, s) for n, s in zip(shape, step, strict=True)]
    for starts in itertools.product(*ranges):
        yield tuple(slice(a, min(a + s, n)) for a, s, n in zip(starts, step, shape, strict=True))


def block_shape(case: str, layout: Layout) -> tuple[int, ...]:
    """Return the Dask block shape for a named block case.

    Parameters
    ----------
    case : {"aligned", "misaligned", "slabs"}
        ``aligned`` uses the shard shape, ``misaligned`` uses (100, 100, 100)
        and ``slabs`` uses single full planes.
    layout : Layout
        The array layout.

    Returns
    -------
    tuple of int
        Block shape to pass to ``dask.array.from_array``.
    """
    if case == "aligned":
        return layout.shards
    if case == "misaligned":
        return tuple(min(100, n) for n in layout.shape)
    if case == "slabs":
        return (1, *layout.shape[1:])
    raise ValueError(f"unknown block case {case!r}; expected one of {BLOCK_CASES}")


def make_volume(shape: tuple[int, ...], seed: int = 0, threads: int = 2) -> np.ndarray:
    """Generate the deterministic smooth ``uint16`` test volume.

    Parameters
    ----------
    shape : tuple of int
        Shape ``(z, y, x)`` of the volume.
    seed : int, optional
        Seed for the noise; the smooth part does not depend on it.
    threads : int, optional
        Number of threads generating slabs concurrently. The result does not
        depend on it: each slab has its own seeded random stream.

    Returns
    -------
    numpy.ndarray
        C-contiguous little-endian ``uint16`` array of the given shape.
    """
    nz, ny, nx = shape
    out = np.empty(shape, dtype=DTYPE)
    two_pi = np.float32(2 * np.pi)
    z = np.arange(nz, dtype=np.float32) / np.float32(max(nz, 1))
    y = (np.arange(ny, dtype=np.float32) / np.float32(max(ny, 1)))[:, None]
    x = (np.arange(nx, dtype=np.float32) / np.float32(max(nx, 1)))[None, :]
    # 2-D pieces computed once; the z dependence is a per-plane scale and offset.
    plane_wave = np.sin(two_pi * (1.5 * y + 0.1)) * np.cos(two_pi * (2.0 * x + 0.3)) + 0.5 * np.sin(
        two_pi * (0.7 * x + 1.3 * y)
    )
    plane_ramp = (y + x) / np.float32(5)
    z_scale = np.cos(two_pi * 0.8 * z)
    z_offset = 0.4 * np.sin(two_pi * (1.2 * z + 0.25)) + z / np.float32(5)

    def fill(z0: int) -> None:
        z1 = min(z0 + SLAB_PLANES, nz)
        field = plane_wave[None] * z_scale[z0:z1, None, None]
        field += plane_ramp[None]
        field += z_offset[z0:z1, None, None]
        field *= np.float32(14000)
        field += np.float32(32000)
        slab = out[z0:z1]
        slab[...] = field
        n = slab.size
        bits = np.random.PCG64([seed, z0]).random_raw(-(-n // 8)).view(np.uint8)[:n]
        slab += (bits & NOISE_MASK).reshape(slab.shape)

    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(fill, range(0, nz, SLAB_PLANES)))
    return out


def fingerprint(volume: np.ndarray) -> str:
    """Return a short checksum identifying the exact volume contents.

    Parameters
    ----------
    volume : numpy.ndarray
        C-contiguous array.

    Returns
    -------
    str
        CRC-32 of the raw bytes, as eight hex digits.
    """
    return f"{zlib.crc32(memoryview(volume).cast('B')):08x}"
