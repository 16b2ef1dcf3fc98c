"""A process that rewrites an Icechunk array slowly until it is killed.

Run as ``python -m tests.support.icechunk_crash_child REPO PROGRESS``: each shard's
block sleeps a little and appends a byte to ``PROGRESS`` when computed, so
the test (``test_icechunk``) kills it while shards are being written.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import dask.array as da
import icechunk
import numpy as np

import shardpipe


def main(repo_path: str, progress: str) -> None:
    icechunk.set_logs_filter("error")
    repo = icechunk.Repository.open(icechunk.local_filesystem_storage(repo_path))

    def slow_block(block: np.ndarray) -> np.ndarray:
        time.sleep(0.05)
        with Path(progress).open("a") as out:
            out.write(".")
        noise = np.random.default_rng().integers(0, 60000, block.shape, dtype="uint16")
        return block + noise  # incompressible: every shard is stored as an object

    source = da.map_blocks(slow_block, da.zeros((256, 256), chunks=32, dtype="uint16"))
    shardpipe.to_sharded_zarr(
        source,
        repo.writable_session("main"),
        path="a",
        region=(slice(0, 256), slice(0, 256)),
        commit="never finished",
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
