"""Peak memory against ``max_mem``: ``python -m benchmarks.memory {rechunk,update} [options]``.

Two cases of issue #28, each run in a fresh process; the peak is the
process's ``VmHWM`` above its RSS just before the work (reset with
``/proc/self/clear_refs``), set against ``max_mem``:

* ``rechunk``: a uint16 Zarr v2 array of (1, Y, X) slabs, zstd-1, rechunked
  into (256, 256, 256) shards of (64, 64, 64) inner chunks on two threads
  (``--shape``, ``--max-mem``; the source is made once under ``--work``);
* ``update``: a region update of two uncompressed (96, 512, 512) shards on
  one thread (Dask's synchronous scheduler), with ``--strategy``.

To measure other code, run it from that code's checkout (the child imports
``shardpipe`` from the working directory).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.child import reset_peak, rss

MiB = 2**20


def make_slabs(path: Path, shape: tuple[int, ...]) -> None:
    """The slab-chunked source, two slabs at a time (noise that zstd-1 shrinks about 3x)."""
    import zarr
    from numcodecs import Zstd

    if (path / ".complete").exists():
        return
    shutil.rmtree(path, ignore_errors=True)
    array = zarr.create_array(
        path, shape=shape, chunks=(1, *shape[1:]), dtype="uint16", zarr_format=2,
        compressors=Zstd(level=1),
    )  # fmt: skip
    rng = np.random.default_rng(0)
    for z in range(0, shape[0], 2):
        depth = min(2, shape[0] - z)
        array[z : z + depth] = 1000 + rng.integers(0, 64, (depth, *shape[1:]), dtype="uint16")
    (path / ".complete").touch()


def rechunk(work: Path, shape: tuple[int, ...], max_mem: str) -> dict[str, Any]:
    """Child: rechunk the slabs on two threads; return the peak above the baseline and the time."""
    import dask

    import shardpipe

    source = work / f"slabs-{'x'.join(map(str, shape))}.zarr"
    make_slabs(source, shape)
    target = work / "rechunked.zarr"
    shutil.rmtree(target, ignore_errors=True)
    with dask.config.set(scheduler="threads", num_workers=2):
        job = shardpipe.plan_rechunk(
            source, target, shards=(256, 256, 256), chunks=(64, 64, 64), max_mem=max_mem,
            storage_options={"fsync": False},
        )  # fmt: skip
        reset_peak()
        base = rss()
        start = time.perf_counter()
        job.execute()
        seconds = time.perf_counter() - start
        peak = rss("VmHWM") - base
    shutil.rmtree(target, ignore_errors=True)
    return {
        "case": "rechunk",
        "shape": list(shape),
        "max_mem": max_mem,
        "blocks": list(job.block_shape),
        "passes": 1 if job.intermediate is None else 2,
        "seconds": round(seconds, 2),
        "peak_above_MiB": round(peak / MiB, 1),
    }


def update(work: Path, strategy: str, max_mem: str) -> dict[str, Any]:
    """Child: one region update of two uncompressed shards on one thread."""
    import dask
    import dask.array as da

    import shardpipe

    shape, shards, chunks = (192, 512, 512), (96, 512, 512), (16, 128, 128)
    local = {"fsync": False}

    def volume(offset: int) -> da.Array:
        return da.random.default_rng(offset).integers(0, 4000, shape, chunks=shards, dtype="u2")

    target = work / "updated.zarr"
    with dask.config.set(scheduler="sync"):
        shardpipe.to_sharded_zarr(
            volume(0), target, shards=shards, chunks=chunks, compressors=None, overwrite=True,
            storage_options=local,
        )  # fmt: skip
        small = (slice(0, 16),) * 3  # warm up: an update of one chunk
        shardpipe.to_sharded_zarr(volume(1)[small], target, region=small, storage_options=local)
        job = shardpipe.prepare_write(
            volume(2), target, region=(slice(None),) * 3, max_mem=max_mem,
            write_strategy=strategy, storage_options=local,
        )  # fmt: skip
        reset_peak()
        base = rss()
        start = time.perf_counter()
        report = job.execute()
        seconds = time.perf_counter() - start
        peak = rss("VmHWM") - base
    shutil.rmtree(target, ignore_errors=True)
    projected = job.plan.max_projected_mem
    return {
        "case": "update",
        "strategy": strategy,
        "max_mem": max_mem,
        "strategies": report.strategies,
        "seconds": round(seconds, 2),
        "peak_above_MiB": round(peak / MiB, 1),
        "projected_MiB": round(projected / MiB, 1),
        "allowed_MiB": round((projected + job.plan.block_nbytes + 24 * MiB) / MiB, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("case", choices=["rechunk", "update"])
    parser.add_argument("--shape", default="64,4096,4096", help="rechunk: source shape")
    parser.add_argument("--max-mem", default=None, help="256MB (rechunk), 110MB (update)")
    parser.add_argument("--strategy", default="auto", help="update: write_strategy")
    parser.add_argument("--work", type=Path, default=Path("benchmarks/out/memory"))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    max_mem = args.max_mem or ("256MB" if args.case == "rechunk" else "110MB")
    if args.child:
        args.work.mkdir(parents=True, exist_ok=True)
        if args.case == "rechunk":
            shape = tuple(int(n) for n in args.shape.split(","))
            result = rechunk(args.work, shape, max_mem)
        else:
            result = update(args.work, args.strategy, max_mem)
        print(json.dumps(result))
        return 0
    command = [sys.executable, "-m", "benchmarks.memory", *(argv or sys.argv[1:]), "--child"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=os.getcwd(), check=False)
    if done.returncode != 0:
        print(done.stderr, file=sys.stderr)
        return done.returncode
    print(done.stdout.strip().splitlines()[-1])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
