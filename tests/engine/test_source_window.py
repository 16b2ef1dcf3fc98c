"""Waves read from ``da.from_zarr`` / ``da.from_array`` sources through windows, not slices."""

from __future__ import annotations

import math
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import pytest
import zarr
from dask.blockwise import Blockwise

from shardpipe.engine.source_window import read_window
from shardpipe.write.prepare import prepare_write
from shardpipe.write.run import start
from tests.support.readers import assert_same, read_zarr


def test_a_window_reads_the_same_blocks_as_a_slice() -> None:
    data = np.arange(30 * 20, dtype=np.int32).reshape(30, 20)
    store = zarr.create_array(store={}, shape=data.shape, dtype=data.dtype, chunks=(7, 20))
    store[...] = data
    source = da.from_zarr(store, chunks=(6, 5))
    box = (slice(12, 30), slice(5, 15))
    window = read_window(source, box)
    assert window is not None
    assert window.chunks == source[box].chunks == ((6, 6, 6), (5, 5))
    assert_same(window.compute(), data[box])


def test_other_sources_are_sliced_as_usual() -> None:
    base = da.from_zarr(zarr.create_array(store={}, shape=(8, 8), dtype="u1", chunks=(4, 4)))
    assert read_window(base + 1, (slice(0, 4), slice(0, 8))) is None
    assert read_window(da.zeros((8, 8), chunks=4), (slice(0, 4), slice(0, 8))) is None


def test_waves_of_a_vast_zarr_source_never_list_its_blocks(tmp_path: Path, monkeypatch) -> None:
    """A source of 2^30 blocks: listing its keys (what Dask's culling of a slice does) fails."""
    n = 2**20
    vast = zarr.create_array(store={}, shape=(n, n), dtype="u2", chunks=(32, 32), fill_value=0)
    vast[0:64, 0:64] = np.arange(64 * 64, dtype="u2").reshape(64, 64)
    source = da.from_zarr(vast, chunks=(32, 32))[0:64, 0:64]  # a slice: not a bare reader
    assert read_window(source, (slice(0, 32), slice(0, 64))) is None
    whole = da.from_zarr(vast, chunks=(32, 32))

    listed = Blockwise.get_output_keys

    def refuse(self: Blockwise):
        if math.prod(self.dims[i] for i in self.output_indices) > 10**6:
            raise AssertionError("the vast source's keys were listed")
        return listed(self)

    job = prepare_write(whole, str(tmp_path), shards=(64, 64), chunks=(32, 32), overwrite=True)
    assert job.wave_schedule().n_waves > 1
    started = start(job, "tok")
    monkeypatch.setattr(Blockwise, "get_output_keys", refuse)
    try:
        first = next(started.wave_graphs(0))
    finally:
        from shardpipe.journal.array_lock import release

        release(started.job.target.shards, started.job.keys, started.marker)
    with dask.config.set(scheduler="threads"):
        reports = dask.compute(*first.publishing)
    assert sum(r.shards for r in reports) >= 1
    written = zarr.open_array(str(tmp_path), mode="r")
    assert_same(written[0:64, 0:64], vast[0:64, 0:64])


@pytest.mark.parametrize("chunks", [(16, 40, 30), (10, 33, 17)])
def test_a_write_in_waves_from_zarr_reads_back_equal(tmp_path: Path, chunks) -> None:
    data = np.random.default_rng(1).integers(0, 500, (96, 80, 60), dtype=np.uint16)
    store = zarr.create_array(
        str(tmp_path / "src"), shape=data.shape, dtype=data.dtype, chunks=(8, 40, 30)
    )
    store[...] = data
    with dask.config.set({"shardpipe.wave-tasks": 5, "scheduler": "threads"}):
        job = prepare_write(
            da.from_zarr(store, chunks=chunks),
            str(tmp_path / "out"),
            shards=(16, 40, 30),
            chunks=(8, 20, 15),
        )
        assert job.wave_schedule().n_waves > 1
        job.execute()
    assert_same(read_zarr(str(tmp_path / "out")), data)
