"""A process that applies a known sequence of region batches until it is killed.

Run as ``python -m tests.support.batch_crash_child PATH STRATEGY PROGRESS``; the
test that kills it (``tests/faults/test_batch_crash.py``) replays the same
sequence in NumPy. The array and the slow disk are those of
:mod:`tests.support.crash_child`.
"""

from __future__ import annotations

import os
import sys

import numpy as np

from tests.support.crash_child import SHAPE, slow_disk

BATCHES = 12
PAIRS = 5


def batch(k: int) -> list[tuple[tuple[slice, ...], np.ndarray]]:
    """The ``(region, data)`` pairs of batch ``k``: small boxes, overlapping or sharing shards."""
    rng = np.random.default_rng(1000 + k)
    pairs = []
    for _ in range(PAIRS):
        region = []
        for n in SHAPE:
            size = int(rng.integers(1, n // 3))
            start = int(rng.integers(0, n - size))
            region.append(slice(start, start + size))
        shape = tuple(s.stop - s.start for s in region)
        values = (rng.integers(0, 50, shape) * rng.integers(0, 2, shape)).astype("uint16")
        pairs.append((tuple(region), values))
    return pairs


def main(path: str, strategy: str, progress: str) -> None:
    import shardpipe

    slow_disk()
    options = {"fsync": False}  # a kill -9 keeps the page cache: like for like with fsync
    with open(progress, "a") as log:
        print("ready", file=log, flush=True)
        for k in range(BATCHES):
            shardpipe.write_regions(
                batch(k), path, write_strategy=strategy, storage_options=options
            )
            print(f"done {k}", file=log, flush=True)
            os.fsync(log.fileno())


if __name__ == "__main__":
    main(*sys.argv[1:4])
