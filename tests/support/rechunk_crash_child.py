"""A process rechunking slabs in two passes until the test kills it (``test_rechunk_kills``).

Run as ``python -m tests.support.rechunk_crash_child SOURCE TARGET PROGRESS``. It
writes ``started`` to PROGRESS once its imports are done and ``done`` at the end.
Every chunk it reads with zarr-python (the source's slabs in pass 1, the
intermediate copy's chunks in pass 2) takes 30 ms more, so that a kill lands in
the pass the test waits for.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import dask
import numpy as np
import zarr

LAYOUT: dict[str, Any] = {"shards": (32, 64, 64), "chunks": (32, 32, 32), "max_mem": "2MB"}
"""Under this budget the slabs go through an intermediate copy that shardpipe places."""


def slabs(path: Path) -> np.ndarray:
    """Write the source, a Zarr v3 array of (1, 128, 256) slabs; return its values."""
    data = np.random.default_rng(11).integers(1, 4000, (32, 128, 256)).astype("uint16")
    array = zarr.create_array(path, shape=data.shape, chunks=(1, 128, 256), dtype="uint16")
    array[...] = data
    return data


def _slow_reads() -> None:
    from zarr.storage import _local

    read = _local._get

    def slow(path: Path, *args: Any) -> Any:
        if path.name != "zarr.json":
            time.sleep(0.03)
        return read(path, *args)

    _local._get = slow  # type: ignore[assignment]  # looked up by name in zarr's LocalStore (zarr-python 3.x)


def main(source: str, target: str, progress: Path) -> None:
    """Rechunk ``source`` into ``target``, reporting to ``progress``."""
    import shardpipe

    _slow_reads()
    progress.write_text("started\n")
    with dask.config.set(scheduler="threads", num_workers=2):
        shardpipe.rechunk(source, target, **LAYOUT)
    with progress.open("a") as out:
        out.write("done\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], Path(sys.argv[3]))
