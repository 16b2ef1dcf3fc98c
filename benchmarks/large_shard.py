"""Shards larger than a worker's memory: ``python -m benchmarks.large_shard [--small]``.

Writes one synthetic ``uint8`` volume, generated block by block inside the
Dask graph, as a single shard four times larger than ``max_mem`` and, for
comparison, as shards that fit in memory. Each case runs in a fresh
subprocess (``benchmarks.large_shard_run``); the report gives MB/s, peak RSS
and whether the one-shard write stayed under 2 x ``max_mem`` per worker.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dask.utils import parse_bytes

from benchmarks.child import run_child
from benchmarks.data import Layout
from benchmarks.report import BUSY_WARN, _fmt, _table
from benchmarks.suite import REPO_ROOT, run_meta

MIB = 1 << 20
DEFAULT_OUT = REPO_ROOT / "benchmarks" / "out"
PRESETS: dict[str, dict[str, Any]] = {
    # 1 GiB, one shard = 4.2 x max_mem; 64 MiB blocks, each one part of the shard.
    "full": {"shape": (1024, 1024, 1024), "blocks": (64, 1024, 1024), "max_mem": "256MB"},
    # 64 MiB, one shard = 4.2 x max_mem; 4 MiB blocks, each one part of the shard.
    "small": {"shape": (256, 512, 512), "blocks": (64, 128, 512), "max_mem": "16MB"},
}
CHUNKS = (64, 64, 64)
FIT_SHARDS = (128, 256, 256)
"""Shards of the comparison case: 16 MiB of uint8, well inside the default max_mem."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line (see ``--help``)."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.large_shard", description=__doc__)
    p.add_argument("--small", action="store_true", help="64 MiB volume, max_mem 16MB (smoke test)")
    p.add_argument("--shape", type=int, nargs=3, metavar=("Z", "Y", "X"), help="volume shape")
    p.add_argument("--blocks", type=int, nargs=3, metavar=("Z", "Y", "X"), help="Dask blocks")
    p.add_argument("--max-mem", help="max_mem of the one-shard write (default 256MB)")
    p.add_argument(
        "--cluster",
        type=int,
        nargs="?",
        const=2,
        default=0,
        metavar="N",
        help="run on a LocalCluster of N single-threaded worker processes (default 2)",
    )
    p.add_argument(
        "--with-dask",
        action="store_true",
        help="also time dask to_zarr into the one-shard array (one task holds the whole shard)",
    )
    p.add_argument("--reps", type=int, default=2, help="repetitions per case, best is kept")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out-dir", type=Path, default=DEFAULT_OUT)
    p.add_argument("--json", type=Path, help="also write all records to this JSON file")
    p.add_argument("--timeout", type=float, default=3600, help="seconds per case")
    args = p.parse_args(argv)
    preset = PRESETS["small" if args.small else "full"]
    args.shape = tuple(args.shape or preset["shape"])
    args.blocks = tuple(args.blocks or preset["blocks"])
    args.max_mem = args.max_mem or preset["max_mem"]
    args.out_dir = args.out_dir.resolve()
    return args


def build_cases(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Return the options of every case, in report order."""
    common = {
        "--shape": args.shape,
        "--chunks": CHUNKS,
        "--blocks": args.blocks,
        "--seed": args.seed,
        "--reps": args.reps,
        "--workers": args.cluster,
        "--out-dir": args.out_dir,
    }
    one = {"--shards": args.shape}
    cases = [
        {"label": "generate only", **common, "--case": "generate", **one},
        {
            "label": "shardpipe, one shard",
            **common,
            "--case": "shardpipe",
            **one,
            "--max-mem": args.max_mem,
        },
        {
            "label": "shardpipe, fitting shards",
            **common,
            "--case": "shardpipe",
            "--shards": tuple(min(f, n) for f, n in zip(FIT_SHARDS, args.shape, strict=True)),
        },
    ]
    if args.with_dask:
        cases.append({"label": "dask to_zarr, one shard", **common, "--case": "dask", **one})
    return cases


def bound_check(r: dict[str, Any]) -> str | None:
    """Return PASS/FAIL of the worker's peak RSS against 2 x max_mem (None if not applicable)."""
    if r.get("status") != "ok" or r.get("case") != "shardpipe" or not r.get("max_mem"):
        return None
    peak = r.get("worker_peak_rss_mib") or r["peak_rss_mib"]
    return "PASS" if peak * MIB < 2 * parse_bytes(r["max_mem"]) else "FAIL"


def num_cell(key: str, spec: str, scale: float = 1.0) -> Callable[[dict[str, Any]], str]:
    """Return a cell formatter for a numeric field of ok records."""

    def cell(r: dict[str, Any]) -> str:
        ok = r.get("status") == "ok" and r.get(key) is not None
        return _fmt(r[key] * scale if ok else None, spec)

    return cell


def table(results: list[dict[str, Any]], cluster: bool) -> str:
    """Render one row per case (worker columns with ``cluster``)."""
    cols: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
        ("case", lambda r: r["label"]),
        ("shards", lambda r: "x".join(map(str, r.get("shards", [])))),
        ("max_mem", lambda r: r.get("max_mem") or "default"),
        ("MB/s", num_cell("mb_per_s", ".1f")),
        ("best s", num_cell("best_s", ".2f")),
        ("cpu s", num_cell("best_cpu_s", ".2f")),
    ]
    if cluster:
        cols += [
            ("wrk cpu s", lambda r: num_cell("worker_cpu_s", ".2f", 1 / r["reps"])(r)),
            ("wrk peak MiB", num_cell("worker_peak_rss_mib", ".0f")),
            ("wrk +peak", lambda r: _fmt(_worker_delta(r), ".0f")),
            ("psutil MiB", num_cell("worker_sampled_peak_mib", ".0f")),
        ]
    else:
        cols.append(("busy%", num_cell("best_others_cpu_share", ".0f", 100)))
    cols += [
        ("peak MiB", num_cell("peak_rss_mib", ".0f")),
        ("+peak MiB", num_cell("peak_delta_mib", ".0f")),
        ("out MiB", num_cell("output_bytes", ".1f", 1 / MIB)),
        ("<2x max_mem", lambda r: bound_check(r) or "-"),
        ("status", lambda r: r.get("status", "error")),
    ]
    rows = [[fmt(r) for _, fmt in cols] for r in results]
    return _table([title for title, _ in cols], rows, left=(0, 1, 2, len(cols) - 1))


def _worker_delta(r: dict[str, Any]) -> float | None:
    """Largest worker peak minus largest worker baseline, MiB (None without workers)."""
    peak, base = r.get("worker_peak_rss_mib"), r.get("worker_baseline_rss_mib")
    return peak - base if r.get("status") == "ok" and peak and base else None


def summary(args: argparse.Namespace, results: list[dict[str, Any]]) -> list[str]:
    """Return the verdict lines: throughput ratio, generation share and memory bound."""
    gen, one, fit = (results[i] if results[i].get("status") == "ok" else None for i in range(3))
    lines = []
    if one and fit:
        lines.append(
            f"throughput one shard / fitting shards: {one['mb_per_s'] / fit['mb_per_s']:.2f}"
        )
    if gen and one:
        lines.append(
            f"data generation alone: {gen['mb_per_s']:.0f} MB/s "
            f"({gen['best_s'] / one['best_s']:.0%} of the one-shard write's time)"
        )
    bound = 2 * parse_bytes(args.max_mem) / MIB
    who = f"max over {args.cluster} workers" if args.cluster else "whole process, threaded"
    if one:
        peak = one.get("worker_peak_rss_mib") or one["peak_rss_mib"]
        base = one.get("worker_baseline_rss_mib") or one["baseline_rss_mib"]
        verdict = "PASS" if peak < bound else "FAIL"
        lines.append(
            f"memory bound, one shard of {one['nbytes'] / MIB:.0f} MiB under max_mem="
            f"{args.max_mem}: peak RSS ({who}) {peak:.0f} MiB vs 2 x max_mem = "
            f"{bound:.0f} MiB: {verdict}  (+peak {peak - base:.0f} MiB: "
            f"{'PASS' if peak - base < bound else 'FAIL'})"
        )
        if args.small:
            lines.append(
                "  (--small: interpreter and libraries alone exceed this bound; judge +peak)"
            )
    busy = [r.get("best_others_cpu_share") or 0 for r in results if r.get("status") == "ok"]
    if not args.cluster and busy and max(busy) > BUSY_WARN:
        lines.append(
            f"WARNING: other processes used up to {max(busy):.0%} of the cores "
            "during a timed write; MB/s are unreliable, compare cpu s."
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    """Run the cases, print the report; exit 1 on error, mismatch or a failed bound."""
    args = parse_args(argv)
    results = []
    for case in build_cases(args):
        label = case.pop("label")
        print(f"{label} ...", end=" ", file=sys.stderr, flush=True)
        start = time.perf_counter()
        record = {"label": label} | run_child("benchmarks.large_shard_run", case, args.timeout)
        results.append(record)
        rate = f"{record['mb_per_s']:.1f} MB/s " if record.get("status") == "ok" else ""
        print(
            f"{record.get('status')} {rate}({time.perf_counter() - start:.1f} s)", file=sys.stderr
        )
    meta = run_meta(args, Layout(args.shape, shards=args.shape, chunks=CHUNKS))
    meta |= {
        "nbytes": results[0].get("nbytes"),
        "dtype": "uint8",
        "blocks": args.blocks,
        "max_mem": args.max_mem,
        "cluster_workers": args.cluster,
    }
    sched = (
        f"LocalCluster {args.cluster} workers x 1 thread" if args.cluster else "threaded scheduler"
    )
    print(
        f"volume {args.shape} uint8 = {meta['nbytes'] / 1e6:.1f} MB raw (synthetic, generated in "
        f"the graph), inner chunks {CHUNKS}, Dask blocks {args.blocks}, zstd level 1, {sched}, "
        f"{meta['cpu_count']} cores, {meta['mem_total_gib']:.0f} GiB RAM, best of {args.reps}\n"
    )
    print(table(results, bool(args.cluster)))
    print(
        "\nMB/s = 1e6 raw bytes per second of the best rep, data generation included; cpu s = "
        "CPU of the case's process in that rep; busy% = share of all cores other processes used;"
        "\npeak MiB = peak RSS of the case's process over all reps; +peak = minus its RSS before "
        "them (libraries, graph, warm-up);\nwrk = largest over the workers: CPU s per rep (mean), "
        "peak RSS (VmHWM), peak minus RSS before the reps; psutil = largest RSS sampled.\n"
    )
    print("\n".join(summary(args, results)))
    notes = [f"  {r['label']}: {n}" for r in results for n in r.get("notes", [])]
    notes += [f"  {r['label']}: {r['message']}" for r in results if r.get("status") != "ok"]
    print("\nNotes:\n" + ("\n".join(notes) or "  (none)"))
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "results": results}, indent=1, default=str))
    failed = [r for r in results if r.get("status") != "ok"]
    bound_failed = not args.small and any(bound_check(r) == "FAIL" for r in results)
    return 1 if failed or bound_failed else 0


if __name__ == "__main__":
    sys.exit(main())
