"""Read-back checks of writer outputs with zarr-python (outside the timing)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from benchmarks.base import VerificationError
from benchmarks.data import Layout


def tree_bytes(path: Path) -> int:
    """Return the total size of all files under ``path``.

    Parameters
    ----------
    path : pathlib.Path
        File or directory.

    Returns
    -------
    int
        Sum of file sizes in bytes.
    """
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _check(condition: bool, message: str) -> None:
    """Raise :class:`VerificationError` with ``message`` unless ``condition``."""
    if not condition:
        raise VerificationError(message)


def verify_zarr(path: Path, volume: np.ndarray, layout: Layout, codec: str) -> int:
    """Check a sharded Zarr v3 array on disk against the source volume.

    Opens the array with zarr-python's default codec pipeline and checks its
    metadata (shape, dtype, shard and inner chunk shape, compressor), that one
    object exists per shard, and the data, shard by shard.

    Parameters
    ----------
    path : pathlib.Path
        Root of the written array.
    volume : numpy.ndarray
        The source volume.
    layout : Layout
        Expected layout.
    codec : {"zstd1", "none"}
        Expected codec setting.

    Returns
    -------
    int
        Bytes on disk under ``path``.

    Raises
    ------
    VerificationError
        On any difference.
    """
    import zarr

    arr = zarr.open_array(str(path), mode="r")
    _check(arr.metadata.zarr_format == 3, f"{path}: zarr_format is not 3")
    _check(arr.shape == volume.shape, f"{path}: shape {arr.shape} != {volume.shape}")
    _check(arr.dtype == volume.dtype, f"{path}: dtype {arr.dtype} != {volume.dtype}")
    _check(arr.shards == layout.shards, f"{path}: shards {arr.shards} != {layout.shards}")
    _check(arr.chunks == layout.chunks, f"{path}: inner chunks {arr.chunks} != {layout.chunks}")
    compressors = arr.compressors
    if codec == "zstd1":
        ok = len(compressors) == 1 and getattr(compressors[0], "level", None) == 1
        _check(ok and type(compressors[0]).__name__ == "ZstdCodec", f"{path}: {compressors}")
    else:
        _check(len(compressors) == 0, f"{path}: expected no compressor, got {compressors}")

    chunk_dir = path / "c"
    n_objects = sum(1 for p in chunk_dir.rglob("*") if p.is_file()) if chunk_dir.exists() else 0
    _check(
        n_objects == layout.n_shards,
        f"{path}: {n_objects} shard objects on disk, expected {layout.n_shards}",
    )
    for region in layout.shard_slices():
        got = arr[region]
        if not np.array_equal(got, volume[region]):
            bad = int(np.count_nonzero(got != volume[region]))
            where = ", ".join(f"{r.start}:{r.stop}" for r in region)
            raise VerificationError(f"{path}: {bad} values differ in shard [{where}]")
    return tree_bytes(path)
