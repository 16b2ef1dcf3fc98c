"""Blocks that do not line up with shards: the same shard bytes as aligned blocks.

A shard fed by several computed Dask blocks (misaligned cubes, single-plane
slabs) is assembled in its task and encoded chunk by chunk; a shard fed by
one aligned block is cut straight from it; blocks that are views of one
NumPy array are read in blocks of one shard instead
(:func:`~shardpipe.engine.source_window.in_shard_blocks`). Each must give the
very bytes of each shard file, zstd + crc32c and uncompressed + crc32c, with
edge shards, on one thread and with chunks encoded on idle cores;
zarr-python and tensorstore read the result back equal.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np
import pytest
import zarr
from zarr.codecs import ZstdCodec

import shardpipe
import shardpipe.engine.encoders as encoders
import shardpipe.write.spec as spec
from shardpipe.engine.source_window import in_shard_blocks
from tests.support.readers import read_tensorstore

SHAPE = (40, 96, 80)  # edge shards in every dimension
SHARDS = (16, 64, 64)
CHUNKS = (8, 16, 16)
BLOCKS = {
    "aligned": SHARDS,
    "misaligned": (10, 25, 30),
    "slabs": (1, *SHAPE[1:]),
}


def noisy(shape: tuple[int, ...]) -> np.ndarray:
    rng = np.random.default_rng(11)
    data = (1000 + rng.integers(0, 256, size=shape)).astype("uint16")
    data[:8, :16, :16] = 0  # one chunk equal to the fill value: not stored
    return data


def shard_files(root: Path) -> dict[str, bytes]:
    files = (root / "c").rglob("*")
    return {str(p.relative_to(root)): p.read_bytes() for p in files if p.is_file()}


def source(data: np.ndarray, blocks: str, *, computed: bool) -> da.Array:
    """``data`` in Dask blocks: views of it, or each block computed (a copy)."""
    x = da.from_array(data, chunks=BLOCKS[blocks])
    return x.map_blocks(np.copy, dtype=x.dtype) if computed else x


def write(
    path: Path, data: np.ndarray, blocks: str, compressors: Any, *, computed: bool = True
) -> None:
    with dask.config.set(scheduler="threads", num_workers=2):
        shardpipe.to_sharded_zarr(
            source(data, blocks, computed=computed),
            str(path),
            shards=SHARDS,
            chunks=CHUNKS,
            compressors=compressors,
            storage_options={"fsync": False},
        )


@pytest.mark.parametrize("codec", ["zstd", "none"])
@pytest.mark.parametrize("cores", [1, 4])
@pytest.mark.parametrize("computed", [True, False], ids=["computed", "numpy-views"])
def test_misaligned_blocks_and_slabs_write_the_bytes_of_aligned_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, codec: str, cores: int, computed: bool
) -> None:
    data = noisy(SHAPE)
    compressors = [ZstdCodec(level=1)] if codec == "zstd" else None
    # the reference: aligned blocks, every chunk encoded on its task's thread
    monkeypatch.setattr(encoders, "task_threads", lambda: 1)
    write(tmp_path / "reference", data, "aligned", compressors)
    reference = shard_files(tmp_path / "reference")
    assert len(reference) == 12
    monkeypatch.setattr(encoders, "task_threads", lambda: cores)
    monkeypatch.setattr(spec, "CPU_COUNT", cores)
    for blocks in ("misaligned", "slabs"):
        write(tmp_path / blocks, data, blocks, compressors, computed=computed)
        assert shard_files(tmp_path / blocks) == reference, blocks
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "slabs"))[...], data)
    np.testing.assert_array_equal(read_tensorstore(str(tmp_path / "misaligned")), data)


@pytest.mark.parametrize("blocks", ["misaligned", "slabs"])
def test_views_of_a_numpy_array_are_read_in_blocks_of_one_shard(blocks: str) -> None:
    """No gathering where the blocks are views: the same array, one block per shard."""
    data = noisy(SHAPE)
    views = source(data, blocks, computed=False)
    shards = in_shard_blocks(views, SHARDS)
    assert shards.chunks == ((16, 16, 8), (64, 32), (64, 16))
    np.testing.assert_array_equal(shards.compute(), data)
    part = data[:, 5:85]  # a view of part of an array: its views are read the same way
    cut = in_shard_blocks(source(part, blocks, computed=False), SHARDS)
    assert cut.chunks[1] == (64, 16)
    np.testing.assert_array_equal(cut.compute(), part)
    computed = source(data, blocks, computed=True)
    assert in_shard_blocks(computed, SHARDS) is computed  # blocks made by tasks: as they are
    aligned = source(data, "aligned", computed=False)
    assert in_shard_blocks(aligned, SHARDS) is aligned


def test_views_are_read_in_shards_only_where_that_fits_max_mem(tmp_path: Path) -> None:
    """The plan of misaligned views: shard blocks; gathered from the views if those don't fit."""
    data = noisy(SHAPE)
    views = source(data, "misaligned", computed=False)
    options: dict[str, Any] = {"shards": SHARDS, "chunks": CHUNKS}
    roomy = shardpipe.prepare_write(views, str(tmp_path / "roomy"), **options)
    assert roomy.plan.blocks.chunks == ((16, 16, 8), (64, 32), (64, 16))
    assert "encode-piece" not in roomy.plan.task_counts
    shard_block = math.prod(SHARDS) * data.itemsize  # 128 KiB; a given block is 15 kB
    tight = shardpipe.prepare_write(
        views, str(tmp_path / "tight"), max_mem=shard_block - 1, **options
    )
    assert tight.plan.blocks.chunks == views.chunks  # a shard's block would not fit
    with dask.config.set(scheduler="threads", num_workers=2):
        tight.execute()
    np.testing.assert_array_equal(read_tensorstore(str(tmp_path / "tight")), data)
