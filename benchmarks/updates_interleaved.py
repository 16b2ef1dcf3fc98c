"""Sparse corrections by shardpipe and zarr-python in turn, call by call, in one process.

Run as ``python -m benchmarks.updates_interleaved [--json PATH]``. On a
machine shared with other work, the writers of ``benchmarks.updates``
run one after another and meet different loads; here one process makes two
arrays of the sparse layout (a smaller volume: ``(256, 256, 1024)`` uint8,
shards ``(256, 256, 256)``, chunks ``(64, 64, 64)``, zstd-1, photon counts)
and corrects 40 scattered inner chunks of each in turn, one call each, so
both writers meet the same moments. Wall and CPU (``process_time``) per
call, and shardpipe's batch of the same 40 corrections (``write_regions``,
one call) when this shardpipe has it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.child import REPO_ROOT
from benchmarks.updates import _tiled_counts, counts, zstd1

SHAPE, CHUNKS, SHARDS = (256, 256, 1024), (64, 64, 64), (256, 256, 256)
CALLS = 40
NO_FSYNC = {"fsync": False}


def run() -> dict[str, Any]:
    """Both arrays, 40 corrections each in turn; seconds and CPU seconds per writer."""
    import dask
    import zarr

    import shardpipe

    dask.config.set(scheduler="threads")
    folder = Path(
        tempfile.mkdtemp(
            prefix="shardpipe-bench-interleaved-", dir=REPO_ROOT / "benchmarks" / "out"
        )
    )
    try:
        data = _tiled_counts(SHAPE, CHUNKS)
        mine, theirs = folder / "shardpipe.zarr", folder / "zarr.zarr"
        shardpipe.to_sharded_zarr(
            data,
            str(mine),
            shards=SHARDS,
            chunks=CHUNKS,
            compressors=zstd1(),
            storage_options=NO_FSYNC,
        )
        arr = zarr.create_array(
            str(theirs),
            shape=SHAPE,
            dtype=data.dtype,
            chunks=CHUNKS,
            shards=SHARDS,
            compressors=zstd1(),
        )
        arr[...] = data
        grid = [n // c for n, c in zip(SHAPE, CHUNKS, strict=True)]
        picks = np.random.default_rng(2).choice(int(np.prod(grid)), CALLS, replace=False)
        updates = []
        for i, flat in enumerate(sorted(picks)):
            corner = np.unravel_index(flat, grid)
            region = tuple(
                slice(int(j) * c, (int(j) + 1) * c) for j, c in zip(corner, CHUNKS, strict=True)
            )
            updates.append((region, counts(100 + i, CHUNKS, "uint8")))
        totals = {"shardpipe": [0.0, 0.0], "zarr": [0.0, 0.0]}
        for region, new in updates:
            for writer in ("zarr", "shardpipe"):
                start, cpu = time.perf_counter(), time.process_time()
                if writer == "zarr":
                    arr[region] = new
                else:
                    shardpipe.to_sharded_zarr(
                        new, str(mine), region=region, storage_options=NO_FSYNC
                    )
                totals[writer][0] += time.perf_counter() - start
                totals[writer][1] += time.process_time() - cpu
        record: dict[str, Any] = {
            writer: {"seconds": s, "cpu": c, "calls": CALLS} for writer, (s, c) in totals.items()
        }
        if hasattr(shardpipe, "write_regions"):
            start, cpu = time.perf_counter(), time.process_time()
            shardpipe.write_regions(updates, str(mine), storage_options=NO_FSYNC)
            record["shardpipe-batch"] = {
                "seconds": time.perf_counter() - start,
                "cpu": time.process_time() - cpu,
                "calls": 1,
            }
        assert np.array_equal(np.asarray(zarr.open_array(str(mine))[...]), np.asarray(arr[...]))
        return record
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """Run it, print one line per writer, optionally write the record as JSON."""
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.updates_interleaved", description=__doc__
    )
    p.add_argument("--json", type=Path, help="also write the record here")
    args = p.parse_args(argv)
    (REPO_ROOT / "benchmarks" / "out").mkdir(exist_ok=True)
    record = run()
    zarr_seconds = record["zarr"]["seconds"]
    for writer, r in record.items():
        print(
            f"{writer:16s} {1e3 * r['seconds'] / CALLS:6.2f} ms wall and "
            f"{1e3 * r['cpu'] / CALLS:6.2f} ms CPU per correction, "
            f"{zarr_seconds / r['seconds']:5.1f}x zarr-python"
        )
    if args.json:
        args.json.write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
