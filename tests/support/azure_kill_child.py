"""A process writing a shard-in-parts array to Azurite until the test kills it.

Run as ``python -m tests.support.azure_kill_child URL ENDPOINT PROGRESS``; it
writes ``started`` to PROGRESS once its imports are done.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import dask
import dask.array as da
import numpy as np


def _slow(block: np.ndarray) -> np.ndarray:
    time.sleep(0.05)  # a slow source, so that the kill lands among the parts
    return block


def source() -> da.Array:
    """The array written (the same Dask name in every process): 16 MiB of uint16, slowly."""
    arr = da.random.default_rng(7).integers(
        0, 60000, (64, 256, 512), chunks=(16, 128, 128), dtype="uint16"
    )
    return arr.map_blocks(_slow, dtype=arr.dtype)


KWARGS = dict(shards=(64, 256, 256), chunks=(16, 64, 64), max_mem="6MB")
"""Two 8 MiB shards, each in several parts under ``max_mem``."""


def main() -> None:
    import shardpipe
    from shardpipe.testing.azure import storage_options_for

    url, endpoint, progress = sys.argv[1:4]
    Path(progress).write_text("started")
    from tests.support import azure_kill_child  # not __main__: the same Dask name as the test's

    with dask.config.set(scheduler="threads", num_workers=2):
        shardpipe.to_sharded_zarr(
            azure_kill_child.source(),
            url,
            storage_options=storage_options_for(endpoint),
            **KWARGS,  # type: ignore[arg-type]
        )
    Path(progress).write_text("done")


if __name__ == "__main__":
    main()
