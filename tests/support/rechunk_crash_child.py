"""A process rechunking slabs in two passes until the test kills it (``test_rechunk_kills``).

Run as ``python -m tests.support.rechunk_crash_child SOURCE TARGET PROGRESS MOMENT``.
It writes ``started`` to PROGRESS once its imports are done, ``held`` once it
holds a read (below) and ``done`` at the end. So that the kill lands where the
test waits whatever the machine's load, reads are then held for good:

* with MOMENT ``copying``, the source's blocks after the first
  :data:`COPYING_BLOCKS` that pass 1 begins to read (two blocks copied whole,
  the others not begun). The source is read a block at a time by shardpipe's
  :class:`~shardpipe.stored.region_reads.RegionReader`, each block's slabs
  fetched together on zarr's thread pool, in the order Dask takes the blocks
  (by the hash of its tasks' names). A block is held before any of its slabs
  is fetched: held reads on that pool would hold its threads, and a block
  whose reads wait behind them would never end;
* with ``copied``, the intermediate copy's chunks after its first
  :data:`COPIED_READS` (pass 2 has published a shard or two); until then
  every chunk of the copy read (with shardpipe's raw reads) takes 30 ms more.
"""

from __future__ import annotations

import os
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


COPYING_BLOCKS = 2
"""The source's blocks (of eight slabs) pass 1 reads; the others are held."""
COPIED_READS = 8
"""Chunks of the copy read before pass 2 stops (two shards of four)."""


def _slow_reads(source: str, progress: Path, moment: str) -> None:
    lock = threading.Lock()
    seen = {"blocks": 0, "copy": 0, "held": 0}

    def hold() -> None:
        """Hold the calling read until the test's kill; tell the test the first time."""
        with lock:
            seen["held"] += 1
            first = seen["held"] == 1
        if first:
            with progress.open("a") as out:
                out.write("held\n")
        time.sleep(600)

    from shardpipe.stored.region_reads import RegionReader

    read_block = RegionReader.read
    root = os.path.abspath(source)

    def held_block(reader: RegionReader, region: tuple[slice, ...]) -> Any:
        """A block of the source (pass 1), read whole or held before its first slab."""
        store = reader.array.store_path.store
        if os.path.abspath(str(getattr(store, "root", ""))) == root:
            with lock:
                seen["blocks"] += 1
                stop = moment == "copying" and seen["blocks"] > COPYING_BLOCKS
            if stop:
                hold()
        return read_block(reader, region)

    RegionReader.read = held_block  # type: ignore[method-assign]  # looked up on each block read

    from shardpipe.rechunking import raw_copy

    read_region = raw_copy.read_region

    def slow_region(store: Any, region: Any, chunk_shape: Any, *args: Any) -> Any:
        """The uncompressed copy's reads (pass 2), counted in chunks as zarr's are."""
        chunks = 1
        for r, c in zip(region, chunk_shape, strict=True):
            chunks *= -(-(r.stop - r.start) // c)
        with lock:
            stop = moment == "copied" and seen["copy"] + chunks > COPIED_READS
            seen["copy"] += chunks
        if stop:
            hold()
        time.sleep(0.03 * chunks)
        return read_region(store, region, chunk_shape, *args)

    raw_copy.read_region = slow_region  # looked up by name when a block of the copy is read


def main(source: str, target: str, progress: Path, moment: str) -> None:
    """Rechunk ``source`` into ``target``, reporting to ``progress``; stop at ``moment``."""
    import shardpipe

    _slow_reads(source, progress, moment)
    progress.write_text("started\n")
    with dask.config.set(scheduler="threads", num_workers=2):
        shardpipe.rechunk(source, target, **LAYOUT)
    with progress.open("a") as out:
        out.write("done\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4])
