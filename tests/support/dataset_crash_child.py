"""A process that appends a known dataset to a store, step by step, until it is killed.

Run as ``python -m tests.support.dataset_crash_child STORE PROGRESS``; the test that
kills it (``test_dataset_crash``) knows the same dataset.
"""

from __future__ import annotations

import os
import sys
import time

import xarray as xr

STEP = 40
FIRST = 100


def full() -> xr.Dataset:
    """The whole dataset; the store holds a prefix of it along time."""
    from shardpipe.testing.datasets import climate_dataset

    return climate_dataset(years=2, nlat=24, nlon=32, chunks={"time": 30, "lat": 10, "lon": 9})


def main(store: str, progress: str) -> None:
    import dask

    import shardpipe  # noqa: F401  (the .shard accessor)
    from tests.support.crash_child import slow_disk

    slow_disk()
    dask.config.set(scheduler="threads")
    data = full()
    with open(progress, "a") as log:
        print("ready", file=log, flush=True)
        done = xr.open_zarr(store).sizes["time"]
        while done < data.sizes["time"]:
            part = data.isel(time=slice(done, done + STEP))
            print(f"start {time.monotonic()}", file=log, flush=True)
            part.shard.to_zarr(
                store,
                append_dim="time",
                write_strategy="append",
                storage_options={"fsync": False},  # a kill -9 keeps the page cache
            )
            done += part.sizes["time"]
            print(f"done {done} {time.monotonic()}", file=log, flush=True)
            os.fsync(log.fileno())


if __name__ == "__main__":
    main(*sys.argv[1:3])
