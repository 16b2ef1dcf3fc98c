"""A process writing an OME-Zarr pyramid (or appending a time point) until the test kills it.

Run as ``python -m tests.support.ome_crash_child TARGET PROGRESS write|append
[STORAGE-OPTIONS-JSON]`` (TARGET a folder, an ``s3://`` URL with its options, or
``icechunk:REPO``: a writable session of an Icechunk repository's ``main``,
committed at the end). It writes ``started`` to PROGRESS once its imports are
done and ``done`` at the end. Its source is deterministic (the same Dask names in every process), so
that ``resume=True`` in the test recognises the interrupted job.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np

KWARGS: dict[str, Any] = dict(
    scale_factors=[{"y": 2, "x": 2}, {"z": 2, "y": 4, "x": 4}, {"z": 4, "y": 8, "x": 8}],
    shards=(1, 8, 32, 32),
    chunks=(1, 8, 16, 32),  # 4 inner chunks a shard: each a request when read back from S3
)
FACTORS = [(1, 1, 2, 2), (1, 2, 4, 4), (1, 4, 8, 8)]
ICECHUNK_PATH = "img"


def _slow(block: np.ndarray) -> np.ndarray:
    time.sleep(0.03)  # a slow source, so that kills land mid-write
    return block


def image(t: int = 3, seed: int = 42, *, slow: bool = True) -> da.Array:
    """The image the child writes (time points ``t``), the same Dask name in every process.

    Its blocks take 30 ms each (``slow``), so that kills land mid-write; the
    same values come at once without it (another Dask name: not for resuming
    the child's job).
    """
    arr = da.random.default_rng(seed).integers(
        0, 4000, (t, 24, 128, 120), chunks=(1, 7, 50, 45), dtype="uint16"
    )
    return arr.map_blocks(_slow, dtype=arr.dtype) if slow else arr


def main(target: str, progress: Path, what: str, options: dict[str, Any] | None = None) -> None:
    """Write the image (or append the new time points) to ``target``, reporting to ``progress``."""
    import shardpipe

    progress.write_text("started\n")
    store: Any = target
    extra: dict[str, Any] = {"storage_options": options}
    commit: dict[str, str] = {}
    if target.startswith("icechunk:"):
        import icechunk

        icechunk.set_logs_filter("error")
        storage = icechunk.local_filesystem_storage(target.removeprefix("icechunk:"))
        store = icechunk.Repository.open(storage).writable_session("main")
        extra, commit = {"path": ICECHUNK_PATH}, {"commit": what}
    with dask.config.set(scheduler="threads", num_workers=2):
        if what == "append":
            shardpipe.to_ome_zarr(image(2, seed=7), store, append_dim="t", **extra, **commit)
        else:
            shardpipe.to_ome_zarr(image(), store, "tzyx", **extra, **commit, **KWARGS)
    with progress.open("a") as out:
        out.write("done\n")


if __name__ == "__main__":
    # through the module's own name: functions in a Dask graph are part of its name
    from tests.support.ome_crash_child import main as run

    run(sys.argv[1], Path(sys.argv[2]), sys.argv[3], *map(json.loads, sys.argv[4:5]))
