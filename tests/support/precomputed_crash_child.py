"""A process that writes a precomputed volume slowly until it is killed.

Run as ``python -m tests.support.precomputed_crash_child PATH PROGRESS``: every source
block sleeps a little and appends a byte to ``PROGRESS`` when computed, so the
test (``test_precomputed``) kills it while shard files are being written.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import dask
import dask.array as da
import numpy as np

import shardpipe

SHAPE = (128, 128, 64, 1)


def volume() -> np.ndarray:
    """The data the child writes."""
    return np.random.default_rng(21).integers(0, 60000, SHAPE, dtype="uint16")


def main(path: str, progress: str) -> None:
    data = volume()

    def slow(block: np.ndarray) -> np.ndarray:
        time.sleep(0.05)
        with Path(progress).open("a") as out:
            out.write(".")
        return block

    source = da.from_array(data, chunks=(32, 32, 64, 1)).map_blocks(slow, dtype=data.dtype)
    with dask.config.set(scheduler="threads", num_workers=2):
        shardpipe.to_neuroglancer_precomputed(
            source,
            path,
            resolution=(1, 1, 1),
            chunk_size=(16, 16, 16),
            sharding={
                "@type": "neuroglancer_uint64_sharded_v1",
                "preshift_bits": 3,
                "hash": "identity",
                "minishard_bits": 3,
                "shard_bits": 4,
                "minishard_index_encoding": "gzip",
                "data_encoding": "gzip",
            },
        )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
