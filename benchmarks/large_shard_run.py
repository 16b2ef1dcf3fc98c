"""Measure one large-shard case in this (fresh) process and write its record as JSON.

Usage (normally started by ``python -m benchmarks.large_shard``)::

    python -m benchmarks.large_shard_run --case shardpipe --shape 1024 1024 1024 \\
        --shards 1024 1024 1024 --chunks 64 64 64 --blocks 64 1024 1024 \\
        --max-mem 256MB --out-dir benchmarks/out --result r.json

The volume is :func:`benchmarks.synth.synthetic_array`, computed block by
block inside the graph of every timed run. Cases: ``generate`` computes the
blocks and drops them (the generation cost inside every write), ``shardpipe``
is ``to_sharded_zarr``, ``dask`` is ``zarr.create_array`` + ``da.to_zarr``.
With ``--workers N`` the run uses a ``distributed.LocalCluster`` of N
single-threaded worker processes; their peak RSS is read from ``VmHWM`` on
each worker (reset before timing) and sampled with psutil from outside.
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import sys
import traceback
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import memory
from benchmarks.child import time_reps
from benchmarks.cluster import maybe_cluster
from benchmarks.synth import region_values, synthetic_array
from benchmarks.verify import tree_bytes

CASES = ("generate", "shardpipe", "dask")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line of one case (see the module docstring)."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.large_shard_run", description=__doc__)
    p.add_argument("--case", required=True, choices=CASES)
    for name in ("shape", "shards", "chunks", "blocks"):
        p.add_argument(f"--{name}", type=int, nargs=3, required=True, metavar=("Z", "Y", "X"))
    p.add_argument("--dtype", default="uint8")
    p.add_argument("--max-mem", help="shardpipe's max_mem (its default if left out)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--reps", type=int, default=1)
    p.add_argument(
        "--workers", type=int, default=0, help="LocalCluster worker processes (0: threads)"
    )
    p.add_argument("--out-dir", type=Path, required=True)
    p.add_argument("--result", type=Path, required=True)
    p.add_argument("--keep-output", action="store_true")
    return p.parse_args(argv)


def _nbytes(block: np.ndarray) -> np.ndarray:
    """``map_blocks`` callback of the ``generate`` case: keep only the block's size."""
    return np.full((1,) * block.ndim, block.nbytes, dtype=np.int64)


def warm_up_write(out_dir: Path) -> None:
    """Write a tiny two-part shard, untimed, so lazy imports and pools precede the baseline."""
    import shardpipe

    path = out_dir / "large-shard-warm-up"
    x = synthetic_array((64, 128, 128), "uint8", (64, 64, 128))
    shardpipe.to_sharded_zarr(x, str(path), chunks=(64, 64, 64), max_mem="2MB", overwrite=True)
    shutil.rmtree(path)


def make_write(args: argparse.Namespace, x: Any, path: Path) -> Any:
    """Return the timed operation of the case, a callable without arguments."""
    import dask.array as da
    import zarr
    from zarr.codecs import ZstdCodec

    if args.case == "generate":
        sizes = x.map_blocks(_nbytes, chunks=tuple((1,) * len(c) for c in x.chunks), dtype="i8")
        return lambda: int(sizes.sum().compute())
    if args.case == "dask":

        def write_dask() -> None:
            target = zarr.create_array(
                store=str(path),
                shape=x.shape,
                dtype=x.dtype,
                chunks=tuple(args.chunks),
                shards=tuple(args.shards),
                compressors=ZstdCodec(level=1),
                overwrite=True,
            )
            da.to_zarr(x, target)

        return write_dask
    import shardpipe

    extra = {"max_mem": args.max_mem} if args.max_mem else {}
    return lambda: shardpipe.to_sharded_zarr(
        x,
        str(path),
        shards=tuple(args.shards),
        chunks=tuple(args.chunks),
        compressors=ZstdCodec(level=1),
        overwrite=True,
        **extra,
    )


def plan_note(args: argparse.Namespace, x: Any) -> str:
    """Describe how shardpipe plans the write (parts per shard, projected memory)."""
    import tempfile

    from zarr.codecs import ZstdCodec

    import shardpipe

    extra = {"max_mem": args.max_mem} if args.max_mem else {}
    with tempfile.TemporaryDirectory() as scratch:  # nothing is written there
        job = shardpipe.prepare_write(
            x,
            f"{scratch}/plan.zarr",
            shards=tuple(args.shards),
            chunks=tuple(args.chunks),
            compressors=ZstdCodec(level=1),
            **extra,
        )
    return repr(job.plan)


def check_output(args: argparse.Namespace, path: Path) -> list[str]:
    """Read a few regions back with zarr-python and run ``shardpipe.verify``.

    Returns
    -------
    list of str
        Problems found (empty if the output matches the generator).
    """
    import zarr

    import shardpipe

    shape, (cz, _, _) = tuple(args.shape), args.chunks
    nz, ny, nx = shape
    arr = zarr.open_array(str(path), mode="r")
    problems = []
    if (arr.shape, arr.shards, arr.chunks) != (shape, tuple(args.shards), tuple(args.chunks)):
        problems.append(f"layout {arr.shape}/{arr.shards}/{arr.chunks} is not the requested one")
    mid = nz // 2
    regions = [
        (slice(0, min(cz, nz)), slice(0, ny), slice(0, nx)),
        (slice(max(mid - 7, 0), min(mid + 9, nz)), slice(0, ny), slice(0, nx)),
        (slice(max(nz - 3, 0), nz), slice(0, ny), slice(0, nx)),
        (slice(nz // 3, min(nz // 3 + 50, nz)), slice(ny // 5, ny), slice(nx // 7, nx // 2)),
    ]
    for region in regions:
        want = region_values(shape, args.dtype, args.seed, region)
        got = arr[region]
        if not np.array_equal(got, want):
            where = ", ".join(f"{s.start}:{s.stop}" for s in region)
            problems.append(f"[{where}]: {int(np.count_nonzero(got != want))} values differ")
    report = shardpipe.verify(str(path))
    problems += [f"verify {key}: {problem}" for key, problem in report.problems[:5]]
    return problems


def output_path(args: argparse.Namespace) -> Path:
    """Return where the case writes its array."""
    return args.out_dir / f"large-shard-{args.case}-{'x'.join(map(str, args.shards))}"


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Run the case and return its record (``status`` ok, error or mismatch)."""
    path = output_path(args)
    record: dict[str, Any] = {k: v for k, v in vars(args).items() if k not in ("out_dir", "result")}
    record |= {"nbytes": int(np.prod(args.shape)) * np.dtype(args.dtype).itemsize, "notes": []}
    x = synthetic_array(tuple(args.shape), args.dtype, tuple(args.blocks), args.seed)
    if args.case == "shardpipe":
        record["notes"].append(plan_note(args, x))
    with maybe_cluster(args.workers) as cluster:
        write = make_write(args, x, path)
        warm_up_write(args.out_dir)
        if cluster:
            cluster.reset()
        gc.collect()
        record["baseline_rss_mib"] = memory.current_rss() / memory.MIB
        memory.reset_peak()
        try:
            record |= time_reps(write, args.reps, lambda: shutil.rmtree(path, ignore_errors=True))
        except Exception as exc:
            tail = traceback.format_exc().strip().splitlines()[-3:]
            return record | {"status": "error", "message": repr(exc), "traceback_tail": tail}
        finally:
            record["peak_rss_mib"] = memory.peak_rss() / memory.MIB
            record |= cluster.read() if cluster else {}
    record["peak_delta_mib"] = record["peak_rss_mib"] - record["baseline_rss_mib"]
    record["mb_per_s"] = record["nbytes"] / 1e6 / record["best_s"]
    if args.case == "generate":
        return record | {"status": "ok"}
    record["output_bytes"] = tree_bytes(path)
    problems = check_output(args, path)
    if problems:
        return record | {"status": "mismatch", "message": "; ".join(problems)}
    return record | {"status": "ok"}


def main(argv: list[str] | None = None) -> int:
    """Run one case, write its JSON record; exit 0 (ok), 1 (error) or 2 (mismatch)."""
    args = parse_args(argv)
    args.out_dir = args.out_dir.resolve()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    try:
        record = measure(args)
    finally:
        if not args.keep_output:
            shutil.rmtree(output_path(args), ignore_errors=True)
    args.result.write_text(json.dumps(record, indent=1))
    if record["status"] != "ok":
        print(f"{record['status'].upper()}: {record['message']}", file=sys.stderr)
    return {"ok": 0, "mismatch": 2}.get(record["status"], 1)


if __name__ == "__main__":
    sys.exit(main())
