"""What the crc32c of every inner chunk costs: ``python -m benchmarks.checksum_cost [--small]``.

The same data written by ``shardpipe.to_sharded_zarr`` with the default
inner chain (``bytes`` -> ``zstd`` as zarr chooses it, level 0) with and
without the ``crc32c`` codec at its end (``chunk_checksums=True``, the
default, or ``False``), each durable (every shard ``fsync``ed, the default)
and not (``storage_options={"fsync": False}``): four cases.

Each repetition is a fresh process (``--child``) that generates the suite's
smooth ``uint16`` volume (``benchmarks.volumes.make_volume``; untimed),
wraps it in Dask blocks of one shard, does one untimed warm-up write, then
writes it once per case, in an order rotated from one repetition to the
next so that no case always runs first or last. Before each write the
target is emptied and ``os.sync()`` flushes the dirty pages of earlier
writes; the kernel's peak-RSS mark is reset. Per write: wall time, the
process's CPU seconds (all threads), the share of all cores that other
processes used meanwhile (``/proc/stat``; the machine is shared), and the
peak RSS above the RSS before the write. The stored chain is checked after
each write (untimed).

The report gives per case the median, fastest and slowest MB/s (raw bytes,
10^6) and CPU seconds, and per durability the cost of the checksum: the
ratio of the median throughputs and of the median CPU seconds, and the
spread of the ratios of the two writes of the same repetition (which ran
seconds apart, under the same load). Target: under 3 % of throughput.

Because the machine is shared, each repetition also measures the encoding
alone, where other processes matter least: the inner chunks of one shard
encoded on one thread through each chain (``shardpipe.codec.chunk_codec.ChunkCodec``,
as the write tasks do), alternately, seven times each (the fastest counts),
timed by the thread's own CPU clock (``time.thread_time``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.child import (
    REPO_ROOT,
    machine_busy_seconds,
    process_cpu_seconds,
    reset_peak,
    rss,
)
from benchmarks.report import table

MIB = 1 << 20
SHAPE, SMALL_SHAPE = (256, 512, 1024), (128, 256, 512)
SHARDS, CHUNKS = (128, 256, 256), (64, 64, 64)
CASES = [
    {"name": "crc32c, fsync", "checksums": True, "fsync": True},
    {"name": "no crc32c, fsync", "checksums": False, "fsync": True},
    {"name": "crc32c, no fsync", "checksums": True, "fsync": False},
    {"name": "no crc32c, no fsync", "checksums": False, "fsync": False},
]


def _write(volume: Any, path: Path, case: dict[str, Any]) -> None:
    import shardpipe

    shardpipe.to_sharded_zarr(
        volume,
        str(path),
        shards=SHARDS,
        chunks=CHUNKS,
        chunk_checksums=case["checksums"],
        storage_options={"fsync": case["fsync"]},
        overwrite=True,
    )


def _chain(path: Path) -> list[str]:
    document = json.loads((path / "zarr.json").read_text())
    inner = document["codecs"][0]["configuration"]["codecs"]
    return [str(codec["name"]) for codec in inner]


def encode_seconds(shard: Any, rounds: int = 7) -> dict[bool, float]:
    """Thread CPU seconds to encode the inner chunks of ``shard``, with and without crc32c.

    The fastest of ``rounds`` alternating passes per chain.
    """
    import itertools

    import numpy as np
    import zarr

    from shardpipe.codec.checksums import checksummed_compressors
    from shardpipe.codec.chunk_codec import ChunkCodec

    codecs = {}
    for flag in (True, False):
        array = zarr.create_array(
            zarr.storage.MemoryStore(),
            shape=shard.shape,
            dtype=shard.dtype,
            chunks=CHUNKS,
            shards=SHARDS,
            compressors=checksummed_compressors("auto", shard.dtype, chunk_checksums=flag),
        )
        codecs[flag] = ChunkCodec.from_metadata(array.metadata)
    corners = itertools.product(*(range(0, n, c) for n, c in zip(shard.shape, CHUNKS, strict=True)))
    chunks = [
        np.ascontiguousarray(shard[tuple(slice(a, a + c) for a, c in zip(at, CHUNKS, strict=True))])
        for at in corners
    ]
    best = {True: float("inf"), False: float("inf")}
    for _ in range(rounds):
        for flag in (True, False):
            start = time.thread_time()
            for chunk in chunks:
                codecs[flag].encode(chunk)
            best[flag] = min(best[flag], time.thread_time() - start)
    return best


def child(shape: tuple[int, ...], rep: int, out_dir: Path) -> list[dict[str, Any]]:
    """One repetition: every case once, in an order rotated by ``rep``; return the records."""
    import dask.array as da

    from benchmarks.volumes import make_volume

    raw = make_volume(shape, seed=0)
    encoded = encode_seconds(raw[: SHARDS[0], : SHARDS[1], : SHARDS[2]])
    volume = da.from_array(raw, chunks=SHARDS, name=False)
    path = out_dir / f"rep{rep}.zarr"
    _write(volume[:, : SHARDS[1], : SHARDS[2]], path, CASES[0])  # warm-up: imports, pools
    shutil.rmtree(path)
    cores = os.cpu_count() or 1
    order = CASES[rep % len(CASES) :] + CASES[: rep % len(CASES)]
    records = []
    for case in order:
        shutil.rmtree(path, ignore_errors=True)
        os.sync()
        baseline = rss()
        reset_peak()
        cpu, busy = process_cpu_seconds(), machine_busy_seconds()
        start = time.perf_counter()
        _write(volume, path, case)
        wall = time.perf_counter() - start
        cpu = process_cpu_seconds() - cpu
        busy_end = machine_busy_seconds()
        others = None
        if busy is not None and busy_end is not None and wall > 0:
            others = max(0.0, busy_end - busy - cpu) / (wall * cores)
        chain = _chain(path)
        expected = ["bytes", "zstd", "crc32c"] if case["checksums"] else ["bytes", "zstd"]
        if chain != expected:
            raise RuntimeError(f"{case['name']}: inner chain {chain}, expected {expected}")
        records.append(
            {
                **case,
                "rep": rep,
                "position": order.index(case),
                "wall_s": wall,
                "cpu_s": cpu,
                "others_cpu_share": others,
                "peak_above_baseline_mib": (rss("VmHWM") - baseline) / MIB,
                "stored_bytes": sum(p.stat().st_size for p in path.rglob("*") if p.is_file()),
                "encode_one_shard_s": encoded[case["checksums"]],
            }
        )
    shutil.rmtree(path, ignore_errors=True)
    return records


def _ratios(records: list[dict[str, Any]], fsync: bool, key: str) -> list[float]:
    """Per repetition: the figure with crc32c over the figure without, same durability."""
    pairs: dict[int, dict[bool, float]] = {}
    for r in records:
        if r["fsync"] == fsync:
            pairs.setdefault(r["rep"], {})[r["checksums"]] = r[key]
    return [p[True] / p[False] for p in pairs.values() if len(p) == 2]


def report(records: list[dict[str, Any]], nbytes: int) -> str:
    """The table per case and the verdict per durability."""
    rows = []
    for case in CASES:
        mine = [r for r in records if r["name"] == case["name"]]
        speeds = [nbytes / r["wall_s"] / 1e6 for r in mine]
        rows.append(
            {
                "case": case["name"],
                "MB/s median": f"{statistics.median(speeds):.0f}",
                "min-max": f"{min(speeds):.0f}-{max(speeds):.0f}",
                "cpu s median": f"{statistics.median(r['cpu_s'] for r in mine):.2f}",
                "others busy% max": f"{max((r['others_cpu_share'] or 0) for r in mine):.0%}",
                "+peak MiB max": f"{max(r['peak_above_baseline_mib'] for r in mine):.0f}",
                "stored MB": f"{mine[0]['stored_bytes'] / 1e6:.2f}",
            }
        )
    columns = [(title, lambda r, k=title: r[k]) for title in rows[0]]
    lines = [table(rows, columns, left=[0]), ""]
    for fsync in (True, False):
        mine = [r for r in records if r["fsync"] == fsync]
        median = {
            flag: statistics.median(r["wall_s"] for r in mine if r["checksums"] == flag)
            for flag in (True, False)
        }
        cpu = {
            flag: statistics.median(r["cpu_s"] for r in mine if r["checksums"] == flag)
            for flag in (True, False)
        }
        walls = _ratios(records, fsync, "wall_s")
        cost = median[True] / median[False] - 1
        lines.append(
            f"{'durable (fsync)' if fsync else 'no fsync'}: crc32c costs {cost:+.1%} of wall "
            f"time (median over median), {cpu[True] / cpu[False] - 1:+.1%} of CPU seconds; "
            f"per-repetition wall ratios {min(walls) - 1:+.1%} .. {max(walls) - 1:+.1%} "
            f"(median {statistics.median(walls) - 1:+.1%}); target < +3%: "
            f"{'met' if cost < 0.03 else 'NOT met'}"
        )
    encode = _ratios(records, True, "encode_one_shard_s")
    shard_mb = 2 * SHARDS[0] * SHARDS[1] * SHARDS[2] / 1e6
    alone = statistics.median(
        r["encode_one_shard_s"] for r in records if r["fsync"] and not r["checksums"]
    )
    lines.append(
        f"encoding alone (one thread, CPU clock, {shard_mb:.0f} MB shard at "
        f"{shard_mb / alone:.0f} MB/s without crc32c): crc32c adds "
        f"{statistics.median(encode) - 1:+.2%} (per repetition {min(encode) - 1:+.2%} .. "
        f"{max(encode) - 1:+.2%})"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help=f"volume {SMALL_SHAPE}")
    parser.add_argument("--reps", type=int, default=5, help="repetitions, each a process (5)")
    parser.add_argument("--json", default=None, help="also write every record to this file")
    parser.add_argument("--out-dir", default=None, help="where the arrays go (a temporary dir)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    shape = SMALL_SHAPE if args.small else SHAPE
    if args.child is not None:
        spec = json.loads(args.child)
        print(json.dumps(child(tuple(spec["shape"]), spec["rep"], Path(spec["out_dir"]))))
        return 0
    out_dir = Path(args.out_dir or tempfile.mkdtemp(prefix="checksum-cost-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    records: list[dict[str, Any]] = []
    for rep in range(args.reps):
        spec = json.dumps({"shape": shape, "rep": rep, "out_dir": str(out_dir)})
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks.checksum_cost", "--child", spec],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode:
            print(done.stderr, file=sys.stderr)
            return 1
        records += json.loads(done.stdout.strip().splitlines()[-1])
    if args.out_dir is None:
        shutil.rmtree(out_dir, ignore_errors=True)
    nbytes = 2 * shape[0] * shape[1] * shape[2]
    print(
        f"checksum cost: uint16 volume {shape} ({nbytes / 1e6:.0f} MB), shards {SHARDS}, "
        f"chunks {CHUNKS}, {args.reps} repetitions; {platform.node()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}"
    )
    print(report(records, nbytes))
    if args.json:
        Path(args.json).write_text(json.dumps({"shape": shape, "records": records}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
