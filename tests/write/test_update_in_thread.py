"""Small updates from NumPy arrays run in the calling thread, with no graph and the same records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np
import pytest
import zarr

import shardpipe
from shardpipe.write import run as run_module
from shardpipe.write.run import IN_THREAD_MAX_SHARDS
from tests.support.readers import assert_same, read_tensorstore, read_zarr
from tests.support.volumes import NO_FSYNC, uneven_volume


def _check(path: Path, expected: np.ndarray) -> None:
    assert_same(read_zarr(str(path)), expected)
    assert_same(read_tensorstore(str(path)), expected)
    assert shardpipe.verify(str(path)).ok
    assert not (path / ".shardpipe" / "job.json").exists()
    assert not list((path / ".shardpipe").rglob("*.*"))  # no marker, undo or done record left


def _no_graphs(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on, fail any write that goes through Dask waves."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a small update from NumPy built a graph")

    monkeypatch.setattr(run_module, "run_waves", refuse)


@pytest.mark.parametrize("index_location", ["end", "start"])
@pytest.mark.parametrize("strategy", ["auto", "in_place", "append", "rewrite"])
def test_small_region_writes_from_numpy_run_without_a_graph(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, index_location: str, strategy: str
) -> None:
    path = tmp_path / "a.zarr"
    data = uneven_volume((40, 30, 32))
    shardpipe.to_sharded_zarr(
        da.from_array(data, chunks=(13, 11, 16)),
        str(path),
        shards=(16, 16, 16),
        chunks=(4, 8, 8),
        index_location=index_location,
        storage_options=NO_FSYNC,
    )
    _no_graphs(monkeypatch)
    regions = [
        (slice(4, 12), slice(8, 16), slice(0, 32)),
        (slice(3, 21), slice(5, 22), slice(7, 30)),  # 8 shards
        (slice(39, 40), slice(29, 30), slice(31, 32)),
        (slice(16, 32), slice(0, 16), slice(16, 32)),
    ]
    for k, region in enumerate(regions):
        new = uneven_volume(tuple(s.stop - s.start for s in region), seed=k + 1)
        returned = shardpipe.to_sharded_zarr(
            new, str(path), region=region, write_strategy=strategy, storage_options=NO_FSYNC
        )
        data[region] = new
        _check(path, data)
        assert isinstance(returned, zarr.Array)
        assert_same(np.asarray(returned[region]), new)


def test_an_append_from_numpy_returns_the_grown_array(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "a.zarr"
    data = uneven_volume((8, 64, 64))
    shardpipe.to_sharded_zarr(data, str(path), shards=(16, 64, 64), chunks=(8, 16, 16))
    _no_graphs(monkeypatch)
    for step in range(3):
        new = uneven_volume((8, 64, 64), seed=step + 3)
        returned = shardpipe.to_sharded_zarr(new, str(path), append_dim=0)
        data = np.concatenate([data, new])
        assert isinstance(returned, zarr.Array) and returned.shape == data.shape
        assert_same(np.asarray(returned[...]), data)
        returned[0:1, 0:2, 0:2] = 9  # writable, as zarr.open_array(mode="r+") was
        data[0:1, 0:2, 0:2] = 9
        _check(path, data)


def test_larger_or_dask_updates_still_run_on_the_scheduler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "a.zarr"
    data = uneven_volume((64, 64, 64))
    shardpipe.to_sharded_zarr(data, str(path), shards=(16, 16, 16), chunks=(8, 8, 8))
    waves: list[int] = []
    real = run_module.run_waves

    def counted(*args: Any, **kwargs: Any) -> Any:
        waves.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(run_module, "run_waves", counted)
    wide = (slice(0, 64), slice(0, 32), slice(0, 32))  # more shards than run in the thread
    assert IN_THREAD_MAX_SHARDS < 4 * 2 * 2
    new = uneven_volume((64, 32, 32), seed=5)
    shardpipe.to_sharded_zarr(new, str(path), region=wide)
    data[wide] = new
    assert waves == [1]
    small = (slice(0, 8), slice(0, 8), slice(0, 8))
    shardpipe.to_sharded_zarr(da.from_array(new[:8, :8, :8]), str(path), region=small)
    data[small] = new[:8, :8, :8]
    assert waves == [1, 1]
    shardpipe.to_sharded_zarr(new[:8, :8, :8] + 1, str(path), region=small)
    data[small] = new[:8, :8, :8] + 1
    assert waves == [1, 1]  # NumPy and one shard: in the thread
    _check(path, data)


@pytest.mark.parametrize("kind", ["region", "append"])
def test_an_update_from_numpy_reads_it_without_a_copy(tmp_path: Path, kind: str) -> None:
    """The update's Dask source is views of the caller's array (``da.from_array`` copies it)."""
    path = tmp_path / "a.zarr"
    shardpipe.to_sharded_zarr(uneven_volume((64, 48)), str(path), shards=(32, 16), chunks=(16, 8))
    new = uneven_volume((40, 48), seed=1)
    if kind == "region":
        job = shardpipe.prepare_write(new, str(path), region=(slice(10, 50), slice(0, 48)))
    else:
        job = shardpipe.prepare_write(new, str(path), append_dim=0)
    blocks = [v for v in dict(job.source.__dask_graph__()).values() if isinstance(v, np.ndarray)]
    assert blocks and all(np.shares_memory(b, new) for b in blocks)
    assert sum(b.size for b in blocks) == new.size
    job.execute()
    expected = (
        np.concatenate([uneven_volume((64, 48)), new])
        if kind == "append"
        else uneven_volume((64, 48))
    )
    if kind == "region":
        expected[10:50] = new
    _check(path, expected)
