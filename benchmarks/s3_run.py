"""Measure one S3 write case in this (fresh) process and write its record as JSON.

Usage (normally started by ``python -m benchmarks.s3``, which runs the S3
server and sets fake credentials in the environment)::

    python -m benchmarks.s3_run --writer shardpipe --case misaligned \\
        --blocks 100 100 100 --shape 256 512 512 --endpoint http://127.0.0.1:PORT \\
        --bucket shardpipe-bench --result r.json

The process generates the harness volume (:func:`benchmarks.data.make_volume`,
untimed), wraps it with ``dask.array.from_array`` in the given blocks, then
times ``--reps`` writes to ``s3://BUCKET/WRITER-CASE.zarr`` (the prefix is
emptied, untimed, before each) on Dask's threaded scheduler, and checks the
last output with zarr-python over s3fs and with ``shardpipe.verify``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import memory
from benchmarks.base import zarr_compressors
from benchmarks.child import time_reps
from benchmarks.data import INNER_CHUNKS, SHARDS, Layout, fingerprint, make_volume
from benchmarks.large_shard_run import plan_note

REGION = "us-east-1"
CREDENTIALS = {"key": "testing", "secret": "testing"}


def storage_options(endpoint: str) -> dict[str, Any]:
    """Return fsspec options for an ``s3fs.S3FileSystem`` on the local server.

    Parameters
    ----------
    endpoint : str
        Server URL, e.g. ``http://127.0.0.1:5000``.

    Returns
    -------
    dict
        Credentials, endpoint and region; no shared instances, no listing cache.
    """
    return {
        **CREDENTIALS,
        "client_kwargs": {"endpoint_url": endpoint, "region_name": REGION},
        "skip_instance_cache": True,
        "use_listings_cache": False,
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line of one case (see the module docstring)."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.s3_run", description=__doc__)
    p.add_argument("--writer", required=True, choices=("shardpipe", "dask"))
    p.add_argument("--case", required=True, help="name of the block case (for the output key)")
    p.add_argument("--blocks", type=int, nargs=3, required=True, metavar=("Z", "Y", "X"))
    p.add_argument("--shape", type=int, nargs=3, required=True, metavar=("Z", "Y", "X"))
    p.add_argument("--max-mem", help="shardpipe's max_mem (its default if left out)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--endpoint", required=True)
    p.add_argument("--bucket", required=True)
    p.add_argument("--result", type=Path, required=True)
    args = p.parse_args(argv)
    args.shards, args.chunks = SHARDS, INNER_CHUNKS  # read by plan_note
    return args


def server_cpu_seconds() -> float | None:
    """Return the CPU seconds the parent process (the S3 server) has used, or None."""
    try:
        with open(f"/proc/{os.getppid()}/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def make_write(args: argparse.Namespace, x: Any, url: str, layout: Layout) -> Any:
    """Return the timed operation, a callable without arguments."""
    import dask.array as da
    import zarr

    options = storage_options(args.endpoint)
    if args.writer == "dask":

        def write_dask() -> None:
            target = zarr.create_array(
                url,
                storage_options=options,
                shape=layout.shape,
                dtype=layout.dtype,
                chunks=layout.chunks,
                shards=layout.shards,
                compressors=zarr_compressors("zstd1"),
                overwrite=True,
            )
            da.to_zarr(x, target)

        return write_dask
    import shardpipe

    extra = {"max_mem": args.max_mem} if args.max_mem else {}
    return lambda: shardpipe.to_sharded_zarr(
        x,
        url,
        shards=layout.shards,
        chunks=layout.chunks,
        compressors=zarr_compressors("zstd1"),
        overwrite=True,
        storage_options=options,
        **extra,
    )


def check_output(
    url: str, options: dict[str, Any], volume: np.ndarray, layout: Layout
) -> list[str]:
    """Compare the array at ``url`` with the volume shard by shard; run ``shardpipe.verify``."""
    import zarr

    import shardpipe

    arr = zarr.open_array(url, mode="r", storage_options=options)
    problems = []
    got_layout = (arr.shape, arr.dtype, arr.shards, arr.chunks)
    if got_layout != (layout.shape, layout.dtype, layout.shards, layout.chunks):
        problems.append(f"layout {got_layout} is not the requested one")
    for region in layout.shard_slices():
        got = arr[region]
        if not np.array_equal(got, volume[region]):
            where = ", ".join(f"{s.start}:{s.stop}" for s in region)
            problems.append(f"[{where}]: {int(np.count_nonzero(got != volume[region]))} differ")
    report = shardpipe.verify(url, storage_options=options)
    problems += [f"verify {key}: {problem}" for key, problem in report.problems[:5]]
    n_shards = sum(s.present for s in report.shards)
    if n_shards != layout.n_shards:
        problems.append(f"{n_shards} shard objects, expected {layout.n_shards}")
    return problems


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Run the case and return its record (``status`` ok, error or mismatch)."""
    import dask.array as da
    import s3fs

    layout = Layout(tuple(args.shape))
    url = f"s3://{args.bucket}/{args.writer}-{args.case}.zarr"
    options = storage_options(args.endpoint)
    fs = s3fs.S3FileSystem(**options)
    record: dict[str, Any] = {k: v for k, v in vars(args).items() if k not in ("result",)}
    record |= {"url": url, "nbytes": layout.nbytes, "notes": []}
    volume = make_volume(layout.shape, seed=args.seed)
    record["fingerprint"] = fingerprint(volume)
    x = da.from_array(volume, chunks=tuple(args.blocks))
    if args.writer == "shardpipe":
        record["notes"].append(plan_note(args, x))
    write = make_write(args, x, url, layout)
    clear = lambda: fs.rm(url, recursive=True) if fs.exists(url) else None  # noqa: E731
    gc.collect()
    record["baseline_rss_mib"] = memory.current_rss() / memory.MIB
    memory.reset_peak()
    try:
        record |= time_reps(write, args.reps, clear, watched_cpu=server_cpu_seconds)
    except Exception as exc:
        tail = traceback.format_exc().strip().splitlines()[-3:]
        return record | {"status": "error", "message": repr(exc), "traceback_tail": tail}
    finally:
        record["peak_rss_mib"] = memory.peak_rss() / memory.MIB
    server, others = record.get("best_watched_cpu_s"), record.get("best_others_cpu_share")
    record["server_cpu_s"] = server
    if server is not None and others is not None:  # the server is not contention
        share = server / (record["best_s"] * (os.cpu_count() or 1))
        record["best_others_cpu_share"] = max(0.0, others - share)
    record["peak_delta_mib"] = record["peak_rss_mib"] - record["baseline_rss_mib"]
    record["mb_per_s"] = layout.nbytes / 1e6 / record["best_s"]
    record["output_bytes"] = int(fs.du(url))
    problems = check_output(url, options, volume, layout)
    if problems:
        return record | {"status": "mismatch", "message": "; ".join(problems)}
    return record | {"status": "ok"}


def main(argv: list[str] | None = None) -> int:
    """Run one case, write its JSON record; exit 0 (ok), 1 (error) or 2 (mismatch)."""
    args = parse_args(argv)
    record = measure(args)
    args.result.write_text(json.dumps(record, indent=1, default=str))
    if record["status"] != "ok":
        print(f"{record['status'].upper()}: {record['message']}", file=sys.stderr)
    return {"ok": 0, "mismatch": 2}.get(record["status"], 1)


if __name__ == "__main__":
    sys.exit(main())
