"""Rechunk a slab-chunked Zarr v2 array into shards: ``python -m benchmarks.rechunk [--small]``.

The source: a (1024, 1024, 1024) uint16 Zarr v2 array (2 GiB) chunked
(1, 1024, 1024), one slab per chunk as an acquisition writes it, zstd-1. The
target: a Zarr v3 array of (256, 256, 256) shards of (64, 64, 64) inner
chunks, zstd-1 (zarr's default codec level differs; all writers get the
same codec). Each writer runs in a fresh process, no fsync anywhere, on a
local disk, with ``max_mem`` 1 GB and then 256 MB:

* ``shardpipe``: ``shardpipe.rechunk(src, dst, shards=, chunks=, max_mem=)``;
* ``shardpipe-temp``: the same with ``temp_store=`` (two passes where the
  affordable blocks are thinner than the inner chunks, else the same one pass);
* ``dask``: ``da.from_zarr(src).rechunk(shards)`` stored into the sharded
  array with ``da.store`` (threaded scheduler; dask has no memory budget, so
  the same run stands for both settings);
* ``cubed``: ``cubed.from_zarr(src).rechunk(shards)`` stored with
  ``cubed.store``, ``allowed_mem`` = ``max_mem`` (threads executor; its
  intermediate store in the work directory).

Per run: wall time, peak RSS of the process (``VmHWM``; the writers use
threads, not child processes), and for shardpipe the planned reads and read
amplification. The target is read back and compared with the source for
every writer.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.child import REPO_ROOT, reset_peak, rss

SHAPE = (1024, 1024, 1024)
SMALL_SHAPE = (256, 512, 512)
SHARDS = (256, 256, 256)
CHUNKS = (64, 64, 64)
BUDGETS = {"1GB": 10**9, "256MB": 256 * 10**6}


def make_source(path: Path, shape: tuple[int, ...]) -> None:
    """The slab-chunked uint16 source, written slab by slab (smooth field plus noise)."""
    import zarr
    from numcodecs import Zstd

    array = zarr.create_array(
        path,
        shape=shape,
        chunks=(1, *shape[1:]),
        dtype="uint16",
        zarr_format=2,
        compressors=Zstd(level=1),
    )
    rng = np.random.default_rng(0)
    y, x = np.meshgrid(np.arange(shape[1]), np.arange(shape[2]), indexing="ij")
    for z in range(0, shape[0], 16):
        depth = min(16, shape[0] - z)
        base = 1000 + 500 * np.sin((x + y + z) / 97.0)
        noise = rng.integers(0, 64, (depth, *shape[1:]))
        array[z : z + depth] = (base[None] + noise).astype("uint16")


def _target(path: Path, shape: tuple[int, ...]) -> Any:
    import zarr
    from zarr.codecs import ZstdCodec

    return zarr.create_array(
        path,
        shape=shape,
        dtype="uint16",
        shards=SHARDS,
        chunks=CHUNKS,
        compressors=ZstdCodec(level=1),
        overwrite=True,
    )


def child(writer: str, source: Path, target: Path, budget: str) -> dict[str, Any]:
    """Run one writer in this process; return time, peak RSS and what it planned."""
    import dask
    import zarr
    from zarr.codecs import ZstdCodec

    dask.config.set(scheduler="threads")
    shape = tuple(zarr.open_array(source, mode="r").shape)
    reset_peak()
    base = rss()
    start = time.perf_counter()
    result: dict[str, Any] = {"writer": writer, "max_mem": budget}
    if writer.startswith("shardpipe"):
        import shardpipe

        two_pass = writer == "shardpipe-temp"
        job = shardpipe.plan_rechunk(
            source,
            target,
            shards=SHARDS,
            chunks=CHUNKS,
            max_mem=budget,
            compressors=ZstdCodec(level=1),
            storage_options={"fsync": False},
            temp_store=str(target) + ".tmp" if two_pass else None,
        )
        job.execute()
        result.update(
            passes=2 if job.intermediate is not None else 1,
            block_shape=list(job.block_shape),
            reads=job.cost.reads,
            read_amplification=job.cost.amplification,
            projected_peak=max(p.nbytes for p in job.write.plan.projected_peaks().values()),
        )
    elif writer == "dask":
        import dask.array as da

        source_array = da.from_zarr(str(source))
        da.store(source_array.rechunk(SHARDS), _target(target, shape), lock=False)
    else:
        import cubed

        spec = cubed.Spec(
            work_dir=str(target) + ".cubed-work",
            allowed_mem=BUDGETS[budget],
            executor_name="threads",
        )
        array = cubed.from_zarr(str(source), spec=spec)
        cubed.store(array.rechunk(SHARDS), _target(target, shape))
    result["seconds"] = time.perf_counter() - start
    result["peak_rss"] = rss("VmHWM")
    result["base_rss"] = base
    got, want = zarr.open_array(target, mode="r"), zarr.open_array(source, mode="r")
    result["identical"] = all(
        np.array_equal(got[z : z + 64], want[z : z + 64]) for z in range(0, shape[0], 64)
    )
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--small", action="store_true", help="a (256, 512, 512) source")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        writer, source, target, budget = args.child
        print(json.dumps(child(writer, Path(source), Path(target), budget)))
        return 0
    results = []
    with tempfile.TemporaryDirectory(dir=REPO_ROOT / "benchmarks") as tmp:
        source = Path(tmp) / "slabs.zarr"
        start = time.perf_counter()
        make_source(source, SMALL_SHAPE if args.small else SHAPE)
        os.sync()  # flush the source's dirty pages now, not during the first writer's run
        print(f"source written in {time.perf_counter() - start:.0f} s", flush=True)
        runs = [("shardpipe", b) for b in BUDGETS] + [("shardpipe-temp", b) for b in BUDGETS]
        runs += [("cubed", b) for b in BUDGETS]
        runs.append(("dask", "none"))
        for writer, budget in runs:
            target = Path(tmp) / f"{writer}.zarr"
            command = [sys.executable, "-m", "benchmarks.rechunk", "--child"]
            command += [writer, str(source), str(target), budget]
            done = subprocess.run(command, capture_output=True, text=True, cwd=REPO_ROOT)
            if done.returncode != 0:
                tail = done.stderr.strip().splitlines()[-1:] or ["?"]
                record = {"writer": writer, "max_mem": budget, "error": tail[0]}
                print(f"{writer:>9} max_mem {budget}: failed: {tail[0]}", flush=True)
            else:
                record = json.loads(done.stdout.strip().splitlines()[-1])
                print(
                    f"{writer:>9} max_mem {budget}: {record['seconds']:.1f} s, peak RSS "
                    f"{record['peak_rss'] / 2**20:.0f} MiB, identical {record['identical']}"
                    + (
                        f", blocks {record['block_shape']}, read amplification "
                        f"{record['read_amplification']:.2f}x"
                        if writer.startswith("shardpipe")
                        else ""
                    ),
                    flush=True,
                )
            results.append(record)
            shutil.rmtree(target, ignore_errors=True)
            shutil.rmtree(str(target) + ".cubed-work", ignore_errors=True)
            shutil.rmtree(str(target) + ".tmp", ignore_errors=True)
            os.sync()  # nor the last writer's output during the next one
    if args.out:
        meta = {"machine": platform.platform(), "python": platform.python_version()}
        args.out.write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
