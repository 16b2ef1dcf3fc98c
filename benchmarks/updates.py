"""Updates of existing sharded arrays: ``python -m benchmarks.updates [--small]``.

Two scenarios on the local file system, each writer in a fresh process, no
fsync anywhere (zarr-python's ``LocalStore`` never fsyncs; shardpipe runs
with ``storage_options={"fsync": False}``). The data are photon counts: a
smooth field with Poisson noise, which zstd-1 compresses about 3x (uniform
noise, which it hardly compresses, made the encoding weigh more than it does
on real volumes):

* **stream**: grow a ``(256, 1024, 1024)`` uint16 zstd-1 array with inner
  chunks ``(8, 128, 128)`` and shards ``(64, 1024, 1024)`` by appending one
  8-plane slab at a time (the first slab is written untimed), with each
  ``write_strategy`` and with zarr-python (``resize`` + assignment);
* **sparse**: in a 1 GiB uint8 zstd-1 array with ``(64, 64, 64)`` inner
  chunks and ``(256, 256, 256)`` shards, replace 1% of the inner chunks
  (40), scattered, one call per chunk with each ``write_strategy`` and with
  zarr-python, and all of them in one call (``shardpipe-batch``:
  :func:`shardpipe.write_regions`).

Per writer: wall time of the updates, CPU time of the process during them
(all threads), bytes written by the process during them (the ``wchar``
count of ``/proc/self/io``: every ``write``/``pwrite`` of any library), the
array's bytes on disk afterwards (and after ``shardpipe.compact``), and the
process's peak RSS during the updates (the data of each update is made
before its timer starts, so it is included; the setup is not). Ratios are
against zarr-python in the same run and against the zstd-1 encoded size of
the new data. Dask's threaded scheduler.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.child import REPO_ROOT, reset_peak, rss
from benchmarks.report import fmt, table

SCENARIOS = {
    "stream": {"shape": (256, 1024, 1024), "chunks": (8, 128, 128), "shards": (64, 1024, 1024)},
    "sparse": {"shape": (1024, 1024, 1024), "chunks": (64, 64, 64), "shards": (256, 256, 256)},
}
SMALL = {"stream": (64, 512, 512), "sparse": (256, 256, 256)}
WRITERS = [
    "shardpipe-auto",
    "shardpipe-in_place",
    "shardpipe-append",
    "shardpipe-rewrite",
    "shardpipe-batch",
    "zarr",
]
ONE_CALL_WRITERS = {"shardpipe-batch"}
"""Writers that apply the sparse corrections in one call (not for the stream of appends)."""
MEAN_COUNTS = {"uint16": 8.0, "uint8": 1.2}
"""Mean photon count of the data: zstd-1 compresses them about 3x."""
NO_FSYNC = {"fsync": False}


def wchar() -> int:
    """Bytes this process has passed to write-like system calls so far."""
    with open("/proc/self/io", encoding="ascii") as io:
        for line in io:
            if line.startswith("wchar:"):
                return int(line.split()[1])
    raise RuntimeError("no wchar in /proc/self/io")


def disk_bytes(path: Path) -> int:
    """Bytes of the shard files under an array folder."""
    return sum(p.stat().st_size for p in (path / "c").rglob("*") if p.is_file())


def zstd1() -> Any:
    from zarr.codecs import ZstdCodec

    return ZstdCodec(level=1)


def encoded_nbytes(chunks: list[np.ndarray]) -> int:
    """Bytes of ``chunks`` encoded with zstd level 1 (as the arrays store them)."""
    import numcodecs

    codec = numcodecs.Zstd(level=1)
    return sum(len(codec.encode(np.ascontiguousarray(c))) for c in chunks)


def counts(k: int, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Deterministic photon counts: Poisson noise on a smooth field (zstd-1: about 3x)."""
    rng = np.random.default_rng(k)
    mean = MEAN_COUNTS[dtype]
    axes = [np.arange(n, dtype=np.float32) for n in shape]
    field = np.float32(mean) + np.float32(mean / 2) * np.sin(axes[-2] / 15)[:, None] * np.cos(
        axes[-1] / 15
    )
    if len(shape) == 3:
        field = field[None] + np.float32(mean / 4) * np.sin(axes[0] / 7 + k)[:, None, None]
    return np.minimum(rng.poisson(np.maximum(field, 0)), np.iinfo(dtype).max).astype(dtype)


def slab(k: int, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Slab ``k`` of the stream (photon counts, :func:`counts`)."""
    return counts(k, shape, dtype)


def _create(writer: str, path: Path, data: np.ndarray, cfg: dict[str, Any], shape: Any) -> Any:
    import zarr

    if writer == "zarr":
        arr = zarr.create_array(
            str(path),
            shape=shape,
            dtype=data.dtype,
            chunks=cfg["chunks"],
            shards=cfg["shards"],
            compressors=zstd1(),
        )
        arr[tuple(slice(0, n) for n in data.shape)] = data
        return arr
    import shardpipe

    return shardpipe.to_sharded_zarr(
        data,
        str(path),
        shards=cfg["shards"],
        chunks=cfg["chunks"],
        compressors=zstd1(),
        storage_options=NO_FSYNC,
    )


def run_stream(writer: str, path: Path, cfg: dict[str, Any]) -> dict[str, Any]:
    """Append 8-plane slabs one at a time; time, count and watch memory of the appends only."""
    import shardpipe

    depth = cfg["chunks"][0]
    full = cfg["shape"]
    plane = full[1:]
    arr = _create(writer, path, slab(0, (depth, *plane), "uint16"), cfg, (depth, *plane))
    reset_peak()
    seconds, cpu, written, encoded = 0.0, 0.0, 0, 0
    for k in range(1, full[0] // depth):
        new = slab(k, (depth, *plane), "uint16")
        encoded += encoded_nbytes(list(_inner(new, cfg["chunks"])))
        before, start, cpu_start = wchar(), time.perf_counter(), time.process_time()
        if writer == "zarr":
            n = arr.shape[0]
            arr.resize((n + depth, *plane))
            arr[n:] = new
        else:
            shardpipe.to_sharded_zarr(
                new,
                str(path),
                append_dim=0,
                write_strategy=writer.split("-")[1],
                storage_options=NO_FSYNC,
            )
        seconds += time.perf_counter() - start
        cpu += time.process_time() - cpu_start
        written += wchar() - before
    calls = full[0] // depth - 1
    return {
        "seconds": seconds,
        "cpu": cpu,
        "written": written,
        "new_encoded": encoded,
        "calls": calls,
    }


def _inner(data: np.ndarray, chunks: tuple[int, ...]) -> Any:
    """The inner chunks of ``data`` (whose shape is a multiple of ``chunks``)."""
    import itertools

    ranges = [range(0, n, c) for n, c in zip(data.shape, chunks, strict=True)]
    for corner in itertools.product(*ranges):
        yield data[tuple(slice(a, a + c) for a, c in zip(corner, chunks, strict=True))]


def run_sparse(writer: str, path: Path, cfg: dict[str, Any]) -> dict[str, Any]:
    """Replace 1% of the inner chunks, scattered: one call per chunk, or one batch."""
    import zarr

    import shardpipe

    shape, chunks = cfg["shape"], cfg["chunks"]
    data = _tiled_counts(shape, chunks)
    _create(writer, path, data, cfg, shape)
    del data
    grid = [n // c for n, c in zip(shape, chunks, strict=True)]
    n_chunks = int(np.prod(grid))
    picks = np.random.default_rng(2).choice(n_chunks, max(1, n_chunks // 100), replace=False)
    arr = zarr.open_array(str(path), mode="r+") if writer == "zarr" else None
    updates = []
    for i, flat in enumerate(sorted(picks)):
        corner = np.unravel_index(flat, grid)
        region = tuple(
            slice(int(j) * c, (int(j) + 1) * c) for j, c in zip(corner, chunks, strict=True)
        )
        updates.append((region, counts(100 + i, chunks, "uint8")))
    encoded = encoded_nbytes([new for _, new in updates])
    reset_peak()
    calls = [updates] if writer in ONE_CALL_WRITERS else [[u] for u in updates]
    seconds, cpu, written = 0.0, 0.0, 0
    for call in calls:
        before, start, cpu_start = wchar(), time.perf_counter(), time.process_time()
        if arr is not None:
            region, new = call[0]
            arr[region] = new
        elif writer in ONE_CALL_WRITERS:
            shardpipe.write_regions(call, str(path), storage_options=NO_FSYNC)
        else:
            region, new = call[0]
            shardpipe.to_sharded_zarr(
                new,
                str(path),
                region=region,
                write_strategy=writer.split("-")[1],
                storage_options=NO_FSYNC,
            )
        seconds += time.perf_counter() - start
        cpu += time.process_time() - cpu_start
        written += wchar() - before
    return {
        "seconds": seconds,
        "cpu": cpu,
        "written": written,
        "new_encoded": encoded,
        "calls": len(calls),
        "chunks": len(updates),
    }


def _tiled_counts(shape: tuple[int, ...], chunks: tuple[int, ...]) -> np.ndarray:
    """The sparse scenario's array: each inner chunk one of 16 chunks of photon counts.

    Drawing a Poisson value per element of 1 GiB takes minutes; chunks drawn
    once and repeated compress like chunks drawn anew (zstd sees one chunk).
    """
    pool = [counts(k, chunks, "uint8") for k in range(16)]
    data = np.empty(shape, dtype=np.uint8)
    for k, corner in enumerate(_corners(shape, chunks)):
        box = tuple(slice(a, a + c) for a, c in zip(corner, chunks, strict=True))
        data[box] = pool[k % len(pool)]
    return data


def _corners(shape: tuple[int, ...], chunks: tuple[int, ...]) -> Any:
    import itertools

    return itertools.product(*(range(0, n, c) for n, c in zip(shape, chunks, strict=True)))


def child(scenario: str, writer: str, small: bool) -> dict[str, Any]:
    """One writer on one scenario, in this (fresh) process."""
    import dask

    dask.config.set(scheduler="threads")
    cfg = dict(SCENARIOS[scenario])
    if small:
        cfg["shape"] = SMALL[scenario]
        if scenario == "stream":
            cfg["shards"] = (16, *SMALL[scenario][1:])
            cfg["chunks"] = (8, 128, 128)
    folder = Path(
        tempfile.mkdtemp(prefix="shardpipe-bench-updates-", dir=REPO_ROOT / "benchmarks" / "out")
    )
    path = folder / "a.zarr"
    try:
        record = (run_stream if scenario == "stream" else run_sparse)(writer, path, cfg)
        record["peak_rss"] = rss("VmHWM")  # peak during the updates (reset after the setup)
        record["disk"] = disk_bytes(path)
        if writer != "zarr":
            import shardpipe

            shardpipe.compact(str(path), threshold=0.0)
            record["disk_compacted"] = disk_bytes(path)
            record["verify_ok"] = shardpipe.verify(str(path)).ok
        return {"scenario": scenario, "writer": writer, **record}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """Run every writer on both scenarios (each in a fresh process) and print the tables."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.updates", description=__doc__)
    p.add_argument("--small", action="store_true", help="small arrays (a smoke test)")
    p.add_argument("--scenarios", default="stream,sparse")
    p.add_argument("--writers", default=",".join(WRITERS))
    p.add_argument("--json", type=Path, help="also write the records here")
    p.add_argument("--child", nargs=2, metavar=("SCENARIO", "WRITER"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(*args.child, args.small)))
        return 0
    (REPO_ROOT / "benchmarks" / "out").mkdir(exist_ok=True)
    records = []
    for scenario in args.scenarios.split(","):
        for writer in args.writers.split(","):
            if scenario == "stream" and writer in ONE_CALL_WRITERS:
                continue  # appends grow the array one call at a time
            cmd = [sys.executable, "-m", "benchmarks.updates", "--child", scenario, writer]
            cmd += ["--small"] * args.small
            out = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, check=False)
            if out.returncode:
                print(out.stderr[-3000:], file=sys.stderr)
                continue
            records.append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(
                f"{scenario} {writer}: {records[-1]['seconds']:.1f} s", file=sys.stderr, flush=True
            )
    if args.json:
        args.json.write_text(json.dumps(records, indent=1))
    print(report(records, args.small))
    return 0


def report(records: list[dict[str, Any]], small: bool) -> str:
    """Markdown tables, one per scenario, with ratios against zarr-python and the new data."""
    lines = [
        f"machine: {os.cpu_count()} CPUs, {_cpu_model()}; sizes: {'small' if small else 'full'}",
        "",
    ]
    mib = float(1 << 20)
    for scenario in SCENARIOS:
        rows = [r for r in records if r["scenario"] == scenario]
        if not rows:
            continue
        zarr_seconds = next((r["seconds"] for r in rows if r["writer"] == "zarr"), None)
        columns: list[tuple[str, Any]] = [
            ("writer", lambda r: r["writer"]),
            ("seconds", lambda r: fmt(r["seconds"], ".2f")),
            (
                "x faster than zarr",
                lambda r, z=zarr_seconds: fmt(z / r["seconds"] if z else None, ".1f"),
            ),
            ("CPU s", lambda r: fmt(r.get("cpu"), ".2f")),
            ("calls", lambda r: fmt(r.get("calls"), "d")),
            (
                "ms per call (wall)",
                lambda r: fmt(1e3 * r["seconds"] / r["calls"] if r.get("calls") else None, ".1f"),
            ),
            ("MiB written", lambda r: fmt(r["written"] / mib, ",.0f")),
            ("written / new data encoded", lambda r: fmt(r["written"] / r["new_encoded"], ".2f")),
            ("MiB on disk", lambda r: fmt(r["disk"] / mib, ",.0f")),
            ("after compact", lambda r: fmt(r.get("disk_compacted", r["disk"]) / mib, ",.0f")),
            ("peak RSS MiB", lambda r: fmt(r["peak_rss"] / mib, ",.0f")),
        ]
        lines.append(f"### {scenario}")
        lines.append(table(rows, columns, left=[0]))
        lines.append("")
    return "\n".join(lines)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="ascii") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


if __name__ == "__main__":
    sys.exit(main())
