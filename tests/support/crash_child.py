"""A process that applies a known sequence of region updates until it is killed.

Run as ``python -m tests.support.crash_child PATH STRATEGY PROGRESS [numpy]``; the test that
kills it (``test_update_crash``) replays the same sequence in NumPy.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np

SHAPE = (48, 192, 192)
SHARDS = (24, 96, 96)
CHUNKS = (8, 32, 32)
UPDATES = 40


def initial() -> np.ndarray:
    """The array before any update."""
    rng = np.random.default_rng(1234)
    return (rng.integers(0, 50, SHAPE) * rng.integers(0, 2, SHAPE)).astype("uint16")


def write_initial(path: Path) -> np.ndarray:
    """Write :func:`initial` at ``path`` (no fsync), as the crash tests start; return it."""
    import shardpipe

    start = initial()
    shardpipe.to_sharded_zarr(
        start, str(path), shards=SHARDS, chunks=CHUNKS, storage_options={"fsync": False}
    )
    return start


def update(k: int) -> tuple[tuple[slice, ...], np.ndarray]:
    """Region and values of update ``k``."""
    rng = np.random.default_rng(k)
    region = []
    for n in SHAPE:
        size = int(rng.integers(n // 4, n // 2))
        start = int(rng.integers(0, n - size))
        region.append(slice(start, start + size))
    shape = tuple(s.stop - s.start for s in region)
    values = (rng.integers(0, 50, shape) * rng.integers(0, 2, shape)).astype("uint16")
    return tuple(region), values


def slow_disk() -> None:
    """Write shards a few KiB at a time with pauses, so that kills land mid-write.

    Only the test's child does this (a slow disk, not a change of order):
    every positioned write still happens in the order shardpipe issues it.
    """
    from shardpipe.storage.local.store import LocalShardStore

    def write_ranges(self: LocalShardStore, key: str, ranges: list) -> None:  # type: ignore[type-arg]
        for offset, buffers in ranges:
            data = b"".join(bytes(b) for b in buffers)
            for start in range(0, len(data), 4096):
                self.write_at(key, offset + start, [data[start : start + 4096]])
                time.sleep(0.002)

    LocalShardStore.write_ranges = write_ranges  # type: ignore[method-assign]


def main(path: str, strategy: str, progress: str, source: str = "dask") -> None:
    """Apply the updates; ``source`` "numpy" passes NumPy arrays (small ones run in this thread)."""
    import dask
    import dask.array as da

    import shardpipe

    slow_disk()
    dask.config.set(scheduler="threads")
    options = {"fsync": False}  # a kill -9 keeps the page cache: like for like with fsync
    with open(progress, "a") as log:
        print("ready", file=log, flush=True)
        for k in range(UPDATES):
            region, values = update(k)
            shardpipe.to_sharded_zarr(
                values if source == "numpy" else da.from_array(values, chunks=(8, 64, 64)),
                path,
                region=region,
                write_strategy=strategy,
                storage_options=options,
            )
            print(f"done {k}", file=log, flush=True)
            os.fsync(log.fileno())


if __name__ == "__main__":
    main(*sys.argv[1:5])
