"""kill -9 during dataset appends: ``repair_dataset`` brings every array back to the last
complete dataset, which the consolidated metadata still describes."""

from __future__ import annotations

import random
import time
from pathlib import Path

import dask
import numpy as np
import xarray as xr

import shardpipe
from shardpipe.dataset import repair_dataset
from tests.support import dataset_crash_child as child
from tests.support.fork_server import ForkServer, wait_for_word

KILLS = 5
VARIABLES = ("t2m", "precip", "stations", "land")


def _check_prefix(ds: xr.Dataset, full: xr.Dataset) -> None:
    """``ds`` holds the first ``len(ds.time)`` days of ``full``, every variable."""
    expected = full.isel(time=slice(0, ds.sizes["time"]))
    np.testing.assert_array_equal(ds.time.values, expected.time.values)
    for name in VARIABLES:
        np.testing.assert_array_equal(ds[name].values, expected[name].values, err_msg=name)


def test_kill_during_dataset_appends_then_repair(tmp_path: Path, fork_server: ForkServer) -> None:
    store = tmp_path / "c.zarr"
    with dask.config.set(scheduler="threads"):
        full = child.full().compute()
        full.isel(time=slice(0, child.FIRST)).shard.to_zarr(
            store, shards={"time": 72}, chunks={"time": 8, "lat": 12, "lon": 16}
        )
    rand = random.Random(11)
    cut_back, rolled_back = 0, 0
    for attempt in range(KILLS):
        before = xr.open_zarr(store).sizes["time"]
        progress = tmp_path / f"progress-{attempt}"
        proc = fork_server.start("tests.support.dataset_crash_child", [str(store), str(progress)])
        try:
            wait_for_word(progress, "start", proc)
            time.sleep(rand.uniform(0.0, 1.0))
            proc.kill()
        finally:
            proc.wait()
        lines = progress.read_text().splitlines()
        finished = [int(line.split()[1]) for line in lines if line.startswith("done")]
        # a shard killed mid-append has a torn index until its undo record is rolled back
        report = repair_dataset(store)
        assert report.ok, str(report)
        assert not report.unknown
        cut_back += bool(report.resized)
        rolled_back += sum(r.rolled_back for r in report.arrays.values())
        # chunks=None: each variable read whole by zarr-python, not in a Dask task per chunk
        seen = xr.open_zarr(store, chunks=None)  # consolidated: the last complete state
        last = finished[-1] if finished else before
        assert seen.sizes["time"] in (last, min(last + child.STEP, full.sizes["time"]))
        _check_prefix(seen, full)
        actual = xr.open_zarr(store, consolidated=False, chunks=None)
        assert actual.sizes["time"] == seen.sizes["time"]
        _check_prefix(actual, full)
        for name in VARIABLES:
            assert shardpipe.verify(store, path=name).ok
    print(
        f"{KILLS} kills: {cut_back} left arrays of different lengths that repair cut back, "
        f"{rolled_back} shard(s) rolled back"
    )
