"""Run the shardpipe benchmark suite: ``python -m benchmarks [--small] [--json out.json]``.

``python -m benchmarks large-shard ...`` and ``python -m benchmarks s3 ...`` run
the stand-alone benchmarks :mod:`benchmarks.large_shard` and :mod:`benchmarks.s3`
(so ``./dev.sh bench large-shard --small`` works too).

Every case (writer x codec x block case) runs in a fresh subprocess
(``benchmarks.run_one``) that generates the same deterministic volume, so peak
memory is per case; this process only schedules the cases, checks that all of
them saw identical data, and prints the report.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from pathlib import Path

from benchmarks import report
from benchmarks.data import BLOCK_CASES, CODECS, FULL_SHAPE, SMALL_SHAPE, Layout
from benchmarks.suite import build_cases, probe_shardpipe, run_case, run_meta, stub_result
from benchmarks.writers import WRITERS

DEFAULT_OUT = Path(__file__).resolve().parent / "out"
SUBCOMMANDS = {"large-shard": "benchmarks.large_shard", "s3": "benchmarks.s3"}
"""Stand-alone benchmarks reachable as the first argument."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the suite's command line.

    Parameters
    ----------
    argv : list of str, optional
        Arguments; ``sys.argv[1:]`` by default.

    Returns
    -------
    argparse.Namespace
        Parsed arguments.
    """
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--small", action="store_true", help=f"volume {SMALL_SHAPE} (smoke test)")
    size.add_argument(
        "--shape",
        type=int,
        nargs=3,
        metavar=("Z", "Y", "X"),
        help=f"custom volume shape (default {FULL_SHAPE})",
    )
    parser.add_argument("--reps", type=int, default=2, help="repetitions per case, best is kept")
    parser.add_argument(
        "--writers",
        default=",".join(WRITERS),
        help="comma-separated subset of: " + ", ".join(WRITERS),
    )
    parser.add_argument("--codecs", default=",".join(CODECS), help="subset of: zstd1, none")
    parser.add_argument(
        "--blocks",
        default=",".join(BLOCK_CASES),
        help="Dask block cases: aligned, misaligned, slabs",
    )
    parser.add_argument("--seed", type=int, default=0, help="noise seed of the volume")
    parser.add_argument(
        "--out-dir", type=Path, default=DEFAULT_OUT, help="where outputs are written (and deleted)"
    )
    parser.add_argument("--json", type=Path, help="also write all results to this JSON file")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per case")
    args = parser.parse_args(argv)
    for option, allowed in (("writers", WRITERS), ("codecs", CODECS), ("blocks", BLOCK_CASES)):
        chosen = [v for v in getattr(args, option).split(",") if v]
        unknown = sorted(set(chosen) - set(allowed))
        if unknown:
            parser.error(f"--{option}: unknown {unknown}; choose from {list(allowed)}")
        setattr(args, option, chosen)
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the suite, print the report and return the exit status.

    Parameters
    ----------
    argv : list of str, optional
        Command-line arguments.

    Returns
    -------
    int
        0 on success; 1 if a case failed, mis-verified, or saw different data.
    """
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in SUBCOMMANDS:
        module = importlib.import_module(SUBCOMMANDS[argv[0]])
        return int(module.main(argv[1:]))
    args = parse_args(argv)
    shape = tuple(args.shape) if args.shape else SMALL_SHAPE if args.small else FULL_SHAPE
    layout = Layout(shape)
    args.out_dir = args.out_dir.resolve()
    cases = build_cases(args.writers, args.codecs, args.blocks)
    shardpipe_problem = probe_shardpipe() if "shardpipe" in args.writers else None
    results = []
    for i, case in enumerate(cases, 1):
        print(f"[{i}/{len(cases)}] {case.describe()} ...", end=" ", file=sys.stderr, flush=True)
        start = time.perf_counter()
        if case.writer == "shardpipe" and shardpipe_problem:
            result = stub_result(case, "unavailable", shardpipe_problem)
        else:
            result = run_case(case, args, shape)
        results.append(result)
        summary = f"{result['mb_per_s']:.1f} MB/s" if result["status"] == "ok" else ""
        elapsed = time.perf_counter() - start
        print(f"{result['status']} {summary} ({elapsed:.1f} s)", file=sys.stderr, flush=True)

    meta = run_meta(args, layout)
    print(report.render(results, meta))
    failures = [r for r in results if r["status"] in ("error", "mismatch")]
    prints = {r["fingerprint"] for r in results if r["status"] == "ok"}
    if len(prints) > 1:
        failures.append({"status": "error", "message": f"cases saw different data: {prints}"})
    if args.json:
        payload = {"meta": meta, "results": results, "ratios": report.ratio_rows(results)}
        args.json.write_text(json.dumps(payload, indent=1))
    for failure in failures:
        print(f"FAILED: {failure.get('writer', '')} {failure['message']}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
