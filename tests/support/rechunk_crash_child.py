"""A process rechunking slabs in two passes until the test kills it (``test_rechunk_kills``).

Run as ``python -m tests.support.rechunk_crash_child SOURCE TARGET PROGRESS MOMENT``.
It writes ``started`` to PROGRESS once its imports are done and ``done`` at the end.
Every chunk it reads (the source's slabs in pass 1 with zarr-python, the
intermediate copy's chunks in pass 2 with shardpipe's raw reads) takes 30 ms
more, and then, so that the kill lands where the test waits whatever the
machine's load, the reads stop for good:
with MOMENT ``copying``, after the source's first :data:`COPYING_READS` slabs (two
blocks copied whole, two not begun); with ``copied``, after the copy's first
:data:`COPIED_READS` chunks (pass 2 has published a shard or two).
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

import dask
import numpy as np
import zarr

LAYOUT: dict[str, Any] = {"shards": (32, 64, 64), "chunks": (32, 32, 32), "max_mem": "1500KB"}
"""Under this budget the slabs go through an intermediate copy that shardpipe places."""


def slabs(path: Path) -> np.ndarray:
    """Write the source, a Zarr v3 array of (1, 128, 256) slabs; return its values."""
    data = np.random.default_rng(11).integers(1, 4000, (32, 128, 256)).astype("uint16")
    array = zarr.create_array(path, shape=data.shape, chunks=(1, 128, 256), dtype="uint16")
    array[...] = data
    return data


COPYING_READS = 16
"""Slabs read before pass 1 stops (two blocks of eight, on two threads)."""
COPIED_READS = 8
"""Chunks of the copy read before pass 2 stops (two shards of four)."""


def _slow_reads(moment: str) -> None:
    from zarr.storage import _local

    read = _local._get
    lock = threading.Lock()
    seen = {"source": 0, "copy": 0}
    limits = {"copying": ("source", COPYING_READS), "copied": ("copy", COPIED_READS)}
    held, limit = limits[moment]

    def slow(path: Path, *args: Any) -> Any:
        if path.name != "zarr.json":
            kind = "copy" if ".intermediate-" in str(path) else "source"
            with lock:
                seen[kind] += 1
                stop = kind == held and seen[kind] > limit
            time.sleep(600 if stop else 0.03)  # until the test's kill
        return read(path, *args)

    _local._get = slow  # type: ignore[assignment]  # looked up by name in zarr's LocalStore (zarr-python 3.x)

    from shardpipe.rechunking import raw_copy

    read_region = raw_copy.read_region

    def slow_region(store: Any, region: Any, chunk_shape: Any, *args: Any) -> Any:
        """The uncompressed copy's reads (pass 2), counted in chunks as zarr's are."""
        chunks = 1
        for r, c in zip(region, chunk_shape, strict=True):
            chunks *= -(-(r.stop - r.start) // c)
        with lock:
            stop = held == "copy" and seen["copy"] + chunks > limit
            seen["copy"] += chunks
        time.sleep(600 if stop else 0.03 * chunks)  # until the test's kill
        return read_region(store, region, chunk_shape, *args)

    raw_copy.read_region = slow_region  # looked up by name when a block of the copy is read


def main(source: str, target: str, progress: Path, moment: str) -> None:
    """Rechunk ``source`` into ``target``, reporting to ``progress``; stop at ``moment``."""
    import shardpipe

    _slow_reads(moment)
    progress.write_text("started\n")
    with dask.config.set(scheduler="threads", num_workers=2):
        shardpipe.rechunk(source, target, **LAYOUT)
    with progress.open("a") as out:
        out.write("done\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4])
