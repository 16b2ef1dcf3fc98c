"""Shards larger than max_mem on a local file system: parts, stamping, failure cleanup."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np
import pytest

import shardpipe
from shardpipe.maintenance.verification import verify
from tests.support.readers import assert_same, read_tensorstore, read_zarr


def _volume(shape: tuple[int, ...] = (64, 64, 64)) -> np.ndarray:
    rng = np.random.default_rng(7)
    return rng.integers(0, 200, shape, dtype="uint8")


@pytest.mark.parametrize("index_location", ["end", "start"])
@pytest.mark.parametrize("dask_chunks", [(16, 64, 64), (10, 30, 64), (64, 64, 8)])
def test_shard_many_times_max_mem(tmp_path: Path, index_location: str, dask_chunks: Any) -> None:
    data = _volume()  # one 256 KiB shard, written in parts under a 72 KiB budget
    shardpipe.to_sharded_zarr(
        da.from_array(data, chunks=dask_chunks),
        str(tmp_path),
        shards=(64, 64, 64),
        chunks=(8, 8, 8),
        index_location=index_location,
        max_mem=72 << 10,
    )
    assert_same(read_zarr(str(tmp_path)), data)
    assert_same(read_tensorstore(str(tmp_path)), data)
    assert verify(str(tmp_path)).ok
    assert not (tmp_path / ".shardpipe/staging").exists()


def _failing(block: np.ndarray, block_info: Any = None) -> np.ndarray:
    if block_info is not None and block_info[None]["chunk-location"] == (3, 0, 0):
        time.sleep(0.3)  # let other parts reach the staging folder first
        raise RuntimeError("simulated worker failure")
    return block


def test_failure_midway_leaves_no_partial_shard_and_no_staging(tmp_path: Path) -> None:
    data = _volume()
    source = da.from_array(data, chunks=(16, 64, 64)).map_blocks(_failing, dtype=data.dtype)
    with dask.config.set(scheduler="threads"), pytest.raises(RuntimeError, match="simulated"):
        shardpipe.to_sharded_zarr(
            source, str(tmp_path), shards=(64, 64, 64), chunks=(8, 8, 8), max_mem=72 << 10
        )
    record = tmp_path / ".shardpipe/write.json"
    leftovers = [p for p in tmp_path.rglob("*") if p.is_file() and p not in (record,)]
    assert leftovers == [tmp_path / "zarr.json"]
    assert not (tmp_path / ".shardpipe/staging").exists()
    assert json.loads(record.read_bytes())["state"] == "running"  # kept for resume=True


def test_cleanup_after_a_failed_delayed_write(tmp_path: Path) -> None:
    data = _volume()
    source = da.from_array(data, chunks=(16, 64, 64)).map_blocks(_failing, dtype=data.dtype)
    delayed = shardpipe.to_sharded_zarr(
        source,
        str(tmp_path),
        shards=(64, 64, 64),
        chunks=(8, 8, 8),
        max_mem=72 << 10,
        compute=False,
    )
    with dask.config.set(scheduler="threads"), pytest.raises(RuntimeError, match="simulated"):
        delayed.compute()
    staging = tmp_path / ".shardpipe/staging"
    assert any(p.is_file() for p in staging.rglob("*"))  # parts were left behind
    assert shardpipe.cleanup(str(tmp_path)) > 0
    assert not staging.exists()
    left = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert left == [".shardpipe/write.json", "zarr.json"]  # the record stays, for resume=True
