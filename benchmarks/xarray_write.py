"""The xarray accessor against xarray's own sharded write: ``python -m benchmarks.xarray_write``.

One synthetic daily climate dataset (``shardpipe.testing.datasets.climate_dataset``:
float32 ``t2m``, float64 ``precip`` packed to int16, float32 ``stations``
stored as int16, a bool mask), 4 years on a 240 x 384 grid: 2.15 GB of raw
data variables, in Dask chunks of (200, 100, 150) that straddle the shards
(365, 240, 384) with inner chunks (73, 60, 96). Two writers, each in a fresh
process, alternating, on Dask's threaded scheduler, no fsync anywhere
(zarr-python's ``LocalStore`` never fsyncs; shardpipe runs with
``storage_options={"fsync": False}``):

* ``shardpipe``: ``ds.shard.to_zarr(path, shards=..., chunks=...)``;
* ``xarray``: ``ds.chunk(<one Dask chunk per shard>).to_zarr(path,
  zarr_format=3, encoding={v: {"shards": ..., "chunks": ...}})``, the rechunk
  that xarray asks for.

Per run: wall time and the process's peak RSS during the write. Then, in a
fresh process, ``t2m`` alone is written by shardpipe with inner chunks of
1.7 MB and of 140 KB, and the mean over time is computed with the store
opened by ``xr.open_zarr`` (one Dask chunk per inner chunk) and by
``shardpipe.open_dataset`` (one per shard), best of 2.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.child import REPO_ROOT, reset_peak, rss, run_module_child

GRID = {"years": 4, "nlat": 240, "nlon": 384}
SMALL = {"years": 1, "nlat": 120, "nlon": 192}
DASK_CHUNKS = {"time": 200, "lat": 100, "lon": 150}
SHARDS = {"time": 365}
CHUNKS = {"time": 73, "lat": 60, "lon": 96}


def child(writer: str, path: Path, grid: dict[str, int]) -> dict[str, Any]:
    """Write the dataset with ``writer`` in this process; return time and peak memory."""
    import dask

    import shardpipe  # noqa: F401  (registers .shard)
    from shardpipe.testing.datasets import climate_dataset

    dask.config.set(scheduler="threads")
    ds = climate_dataset(**grid, chunks=DASK_CHUNKS)
    raw = sum(v.nbytes for v in ds.data_vars.values())
    reset_peak()
    base = rss()
    start = time.perf_counter()
    if writer == "shardpipe":
        ds.shard.to_zarr(path, shards=SHARDS, chunks=CHUNKS, storage_options={"fsync": False})
    else:
        shape = {"time": SHARDS["time"], "lat": grid["nlat"], "lon": grid["nlon"]}
        encoding = {
            name: {
                **ds[name].encoding,
                "shards": tuple(shape[d] for d in ds[name].dims),
                "chunks": tuple(CHUNKS[d] for d in ds[name].dims),
            }
            for name in ds.data_vars
        }
        ds.chunk(shape).to_zarr(path, zarr_format=3, encoding=encoding, mode="w")
    seconds = time.perf_counter() - start
    result: dict[str, Any] = {
        "writer": writer,
        "seconds": seconds,
        "raw_bytes": raw,
        "peak_rss": rss("VmHWM"),
        "base_rss": base,
    }
    return result


READ_LAYOUTS = {"1.7 MB inner chunks": (73, 60, 96), "140 KB inner chunks": (73, 20, 24)}


def read_child(path: Path, grid: dict[str, int]) -> list[dict[str, Any]]:
    """Mean over time of ``t2m`` opened both ways, for two inner-chunk sizes (best of 2)."""
    import dask
    import xarray as xr

    import shardpipe
    from shardpipe.testing.datasets import climate_dataset

    dask.config.set(scheduler="threads")
    ds = climate_dataset(**grid, chunks=DASK_CHUNKS)[["t2m"]]
    results = []
    for layout, chunks in READ_LAYOUTS.items():
        target = path / f"{chunks[1]}.zarr"
        ds.shard.to_zarr(
            target,
            shards=SHARDS,
            chunks=dict(zip(("time", "lat", "lon"), chunks, strict=True)),
            storage_options={"fsync": False},
        )
        for opener in (xr.open_zarr, shardpipe.open_dataset):
            best = float("inf")
            for _ in range(2):
                opened = opener(target)
                start = time.perf_counter()
                opened.t2m.mean("time").compute()
                best = min(best, time.perf_counter() - start)
            results.append(
                {
                    "layout": layout,
                    "opener": f"{opener.__module__.split('.')[0]}.{opener.__name__}",
                    "dask_chunks": opened.t2m.data.npartitions,
                    "seconds": best,
                }
            )
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--small", action="store_true", help="1 year on 120 x 192 (a smoke run)")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    parser.add_argument("--child", nargs=2, metavar=("WRITER", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    grid = SMALL if args.small else GRID
    if args.child:
        writer, where = args.child[0], Path(args.child[1])
        done = read_child(where, grid) if writer == "read" else child(writer, where, grid)
        print(json.dumps(done))
        return 0
    results = []
    with tempfile.TemporaryDirectory(dir=REPO_ROOT / "benchmarks") as tmp:
        for rep in range(args.reps):
            for writer in ("shardpipe", "xarray"):
                path = Path(tmp) / f"{writer}.zarr"
                record = run_module_child("benchmarks.xarray_write", args.small, writer, str(path))
                record["rep"] = rep
                results.append(record)
                print(
                    f"{writer:>9} rep {rep}: {record['seconds']:.1f} s, "
                    f"{record['raw_bytes'] / record['seconds'] / 1e6:.0f} MB/s raw, "
                    f"peak RSS {record['peak_rss'] / 2**20:.0f} MiB",
                    flush=True,
                )
                shutil.rmtree(path, ignore_errors=True)
    best = {
        w: min(r["seconds"] for r in results if r["writer"] == w) for w in ("shardpipe", "xarray")
    }
    peak = {
        w: max(r["peak_rss"] for r in results if r["writer"] == w) for w in ("shardpipe", "xarray")
    }
    print(f"best time: xarray / shardpipe = {best['xarray'] / best['shardpipe']:.2f}x")
    print(
        f"peak RSS: shardpipe {peak['shardpipe'] / 2**20:.0f} MiB, "
        f"xarray {peak['xarray'] / 2**20:.0f} MiB"
    )
    with tempfile.TemporaryDirectory(dir=REPO_ROOT / "benchmarks") as tmp:
        reads = run_module_child("benchmarks.xarray_write", args.small, "read", tmp)
    for r in reads:
        print(
            f"mean over time, {r['layout']}: {r['opener']} {r['seconds']:.2f} s "
            f"({r['dask_chunks']} Dask chunks)"
        )
    if args.out:
        meta = {"machine": platform.platform(), "python": platform.python_version(), "grid": grid}
        record = {"meta": meta, "results": results, "reads": reads}
        args.out.write_text(json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
