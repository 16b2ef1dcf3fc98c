"""Rechunk sweep: ``python -m benchmarks.rechunk_sweep [--small] [--cases ...] --out FILE.json``.

Issue #42's benchmark: three rechunks (:mod:`benchmarks.rechunk_cases`:
slabs, a time series, camera frames), shardpipe at each ``max_mem`` of the
sweep (64MB, 128MB, 256MB, 1GB; with ``temp_store=`` too where that plans
otherwise; on a LocalCluster of 2 single-threaded workers too), against
anchors on the same data: the rechunk limit (:mod:`benchmarks.rechunk_limit`),
tensorstore, dask (tasks, and p2p on the same LocalCluster), rechunker and
cubed (:mod:`benchmarks.rechunk_writers`). Each run is a fresh process; its
record has wall seconds, peak RSS, shardpipe's plan and whether the target
read back equals the source. Prints one table per case
(:mod:`benchmarks.rechunk_report`); exits 1 if any target differs from its
source or any writer failed for another reason than not supporting the
target.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.child import REPO_ROOT
from benchmarks.rechunk_cases import CASES, SMALL_CASES, RechunkCase, ensure_source
from benchmarks.rechunk_report import table
from benchmarks.rechunk_writers import BUDGETED, WRITERS, measure, plan_facts, shardpipe_job

BUDGETS = ("64MB", "128MB", "256MB", "1GB")
SMALL_BUDGETS = ("4MB", "64MB")
"""``--small`` shrinks the budgets with the data (4MB plans two passes on slabs), two of them."""
PACKAGES = (
    "numpy",
    "zarr",
    "numcodecs",
    "dask",
    "distributed",
    "tensorstore",
    "cubed",
    "rechunker",
)
FAILED = ("error", "mismatch")


def runs(cases: list[str], budgets: list[str], writers: list[str]) -> list[tuple[str, str, str]]:
    """(case, writer, budget) in the order they run: anchors first, then each budget."""
    out = []
    for case in cases:
        out += [(case, w, "none") for w in WRITERS if w in writers and w not in BUDGETED]
        out += [(case, w, b) for b in budgets for w in BUDGETED if w in writers]
    return out


def same_plan_with_temp(case: RechunkCase, source: Path, target: Path, budget: str) -> bool:
    """Whether ``temp_store=`` leaves shardpipe's plan as it is without (then it is not run)."""
    with_temp = plan_facts(shardpipe_job(case, source, target, budget, temp=True))
    without = plan_facts(shardpipe_job(case, source, target, budget, temp=False))
    return bool(with_temp["plan"] == without["plan"])


def run_child(spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Run one writer in ``python -m benchmarks.rechunk_sweep --child SPEC``; its record."""
    command = [sys.executable, "-m", "benchmarks.rechunk_sweep", "--child", json.dumps(spec)]
    base = {"case": spec["case"], "writer": spec["writer"], "budget": spec["budget"]}
    try:
        done = subprocess.run(
            command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return base | {"status": "error", "message": f"timed out after {timeout:.0f} s"}
    with contextlib.suppress(IndexError, ValueError):
        return dict(json.loads(done.stdout.strip().splitlines()[-1]))
    tail = " | ".join(done.stderr.strip().splitlines()[-3:])
    return base | {"status": "error", "message": f"exit {done.returncode}: {tail}"}


def summary(record: dict[str, Any]) -> str:
    """One progress line for a finished run."""
    head = f"{record['case']:>10} {record['writer']:>17} {record['budget']:>5}: "
    if record.get("status") != "ok":
        return head + f"{str(record.get('status')).upper()}: {record.get('message')}"
    line = f"{record['seconds']:.2f} s, +{record['peak_delta_mib']:.0f} MiB"
    if record.get("worker_peak_delta_mib") is not None:
        line += f" (worker +{record['worker_peak_delta_mib']:.0f} MiB)"
    if record.get("limit_s") is not None:
        line += f", limit {record['limit_s']:.2f} s"
    if record.get("passes"):
        line += f", {record['passes']} pass(es), {record['reads']:,} reads"
    return head + line + ", target equals source"


def meta(args: argparse.Namespace, cases: dict[str, RechunkCase]) -> dict[str, Any]:
    """The run's description for the JSON."""
    versions = {}
    for package in PACKAGES:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            versions[package] = importlib.metadata.version(package)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True
    ).stdout.strip()
    return {
        "machine": platform.platform(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "versions": versions,
        "commit": commit,
        "small": args.small,
        "reps": args.reps,
        "cases": {name: case.describe() for name, case in cases.items()},
    }


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The command line (see ``--help``)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument(
        "--small", action="store_true", help="a few MiB per case: checks the harness"
    )
    parser.add_argument(
        "--cases", default=",".join(CASES), help="comma-separated, of " + ", ".join(CASES)
    )
    parser.add_argument(
        "--budgets", default=None, help=f"max_mem values (default {','.join(BUDGETS)})"
    )
    parser.add_argument(
        "--writers", default=",".join(WRITERS), help="comma-separated, of " + ", ".join(WRITERS)
    )
    parser.add_argument(
        "--reps", type=int, default=None, help="writes per run, the fastest reported (2; --small 1)"
    )
    parser.add_argument(
        "--work", type=Path, default=None, help="sources and targets (default benchmarks/out/)"
    )
    parser.add_argument("--timeout", type=float, default=3600, help="seconds allowed per run")
    parser.add_argument("--out", type=Path, default=None, help="write every record as JSON here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for name, allowed in (("cases", CASES), ("writers", WRITERS)):
        unknown = set(getattr(args, name).split(",")) - set(allowed)
        if unknown:
            parser.error(
                f"--{name}: unknown {', '.join(sorted(unknown))}; use {', '.join(allowed)}"
            )
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the sweep (or, with ``--child``, one run); see the module's docstring."""
    args = parse(argv)
    if args.child:
        with contextlib.redirect_stdout(sys.stderr):  # stdout carries only the record
            record = measure(json.loads(args.child))
        print(json.dumps(record, default=str))
        return 0
    args.reps = args.reps or (1 if args.small else 2)
    table_of = SMALL_CASES if args.small else CASES
    cases = {name: table_of[name] for name in args.cases.split(",")}
    budgets = (
        args.budgets.split(",") if args.budgets else list(SMALL_BUDGETS if args.small else BUDGETS)
    )
    work = args.work or REPO_ROOT / "benchmarks" / "out" / (
        "rechunk-sweep-small" if args.small else "rechunk-sweep"
    )
    started = time.perf_counter()
    sources = {}
    for name, case in cases.items():
        start = time.perf_counter()
        sources[name], written = ensure_source(case, work)
        took = f"written in {time.perf_counter() - start:.0f} s" if written else "cached"
        print(f"source {case.describe()}: {took}", flush=True)
    os.sync()  # the sources' dirty pages now, not during the first run
    records: list[dict[str, Any]] = []
    unsupported: dict[str, str] = {}  # writer -> why: not tried again on the next case or budget
    for name, writer, budget in runs(list(cases), budgets, args.writers.split(",")):
        target = work / "targets" / f"{name}-{writer}-{budget}.zarr"
        record = {"case": name, "writer": writer, "budget": budget}
        if writer in unsupported:
            record |= {"status": "unsupported", "message": unsupported[writer]}
        elif writer == "shardpipe-temp" and same_plan_with_temp(
            cases[name], sources[name], target, budget
        ):
            record |= {"status": "skipped", "message": "temp_store= plans as without it"}
        else:
            spec = {"case": name, "writer": writer, "budget": budget, "small": args.small}
            spec |= {"source": str(sources[name]), "target": str(target), "reps": args.reps}
            spec["work"] = str(work)
            record = run_child(spec, args.timeout)
            if record.get("status") == "unsupported":
                unsupported[writer] = f"as on {name} {budget}: {record.get('message')}"
        for path in (target, Path(f"{target}.tmp"), Path(f"{target}.cubed")):
            shutil.rmtree(path, ignore_errors=True)
        os.sync()  # nor this run's output during the next
        print(summary(record), flush=True)
        records.append(record)
    description = meta(args, cases) | {"budgets": budgets, "seconds": time.perf_counter() - started}
    print("\n" + table(records, description["cases"]))
    print(f"\nsweep took {description['seconds']:.0f} s")
    if args.out:
        args.out.write_text(
            json.dumps({"meta": description, "results": records}, indent=2, default=str) + "\n"
        )
    failed = [r for r in records if r.get("status") in FAILED]
    for r in failed:
        print(f"FAILED: {r['case']} {r['writer']} {r['budget']}: {r['status']}: {r.get('message')}")
    return 1 if failed else 0


if __name__ == "__main__":
    # Run under its own name, so what is sent to cluster workers is pickled by reference.
    from benchmarks.rechunk_sweep import main as sweep_main

    raise SystemExit(sweep_main())
