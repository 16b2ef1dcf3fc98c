"""A process writing a known array until the test kills it (``test_sigkill_then_resume``).

Run as ``python -m tests.support.resume_child TARGET PROGRESS [update]``. It writes
``started`` to PROGRESS once its imports are done and ``done`` at the end.
With ``update`` it writes :func:`update` into the existing array at TARGET.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np


def _slow(block: np.ndarray) -> np.ndarray:
    time.sleep(0.02)  # a slow source, so that kills land mid-write
    return block


def source() -> tuple[da.Array, dict[str, Any]]:
    """The array the child writes (the same Dask name in every process) and the arguments."""
    arr = da.random.default_rng(42).integers(
        0, 1000, (96, 128, 128), chunks=(8, 64, 64), dtype="uint16"
    )
    # 12 shards, each written in 16 parts: kills land among parts, stamps and publishes
    kwargs = dict(shards=(32, 64, 64), chunks=(8, 32, 32), max_mem=150_000)
    return arr.map_blocks(_slow, dtype=arr.dtype), kwargs


REGION = (slice(5, 90), slice(10, 128), slice(0, 100))
"""Where :func:`update` writes (every shard of the array is touched)."""


def update() -> da.Array:
    """The values the child writes into :data:`REGION` (the same Dask name everywhere)."""
    shape = tuple(s.stop - s.start for s in REGION)
    arr = da.random.default_rng(7).integers(0, 1000, shape, chunks=(8, 64, 64), dtype="uint16")
    return arr.map_blocks(_slow, dtype=arr.dtype)


def main(target: str, progress: Path, what: str = "write") -> None:
    """Write the array (or the update) to ``target``, reporting to ``progress``."""
    import shardpipe

    arr, kwargs = source()
    progress.write_text("started\n")
    with dask.config.set(scheduler="threads", num_workers=2):
        if what == "update":
            shardpipe.to_sharded_zarr(update(), target, region=REGION, max_mem="64MB")
        else:
            shardpipe.to_sharded_zarr(arr, target, **kwargs)
    with progress.open("a") as out:
        out.write("done\n")


if __name__ == "__main__":
    # through the module's own name: functions in a Dask graph are part of its
    # name, and ``__main__._slow`` is not ``tests.support.resume_child._slow``
    from tests.support.resume_child import main as run

    run(sys.argv[1], Path(sys.argv[2]), *sys.argv[3:])
