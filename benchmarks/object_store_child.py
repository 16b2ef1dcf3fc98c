"""One case of the object-store benchmark in a fresh process.

``python -m benchmarks.object_store_child JOB-JSON``, where the job holds the
case (:class:`~benchmarks.cases.Case`), the proxy's control address (or
null: no proxy) and the storage options of the direct endpoint (for
clearing the target and verifying, never through the proxy). The child
builds the volume (untimed), prepares the write, starts the case's
LocalCluster if any (and puts the volume's blocks in its workers' memory,
untimed: the threaded writers write from this process's memory, the
cluster's from its workers'), records its RSS and resets the peak mark; then per rep:
empties the target (directly), resets the proxy's counters, times the
write, reads the counters. Then it verifies the output through the direct
endpoint and prints one JSON record on stdout. :func:`run` is the parent's side.
"""

from __future__ import annotations

import contextlib
import gc
import json
import shutil
import subprocess
import sys
import time
import traceback
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from benchmarks import child, volumes
from benchmarks.cases import Case
from benchmarks.object_store_writers import WRITERS, check
from benchmarks.shaping_proxy import control

MIB = 1 << 20


def clear(case: Case) -> None:
    """Delete the case's target (an ``s3://`` prefix with the given options, or a folder)."""
    if case.target.startswith("s3://"):
        import fsspec

        fs, path = fsspec.url_to_fs(case.target, **(case.storage_options or {}))
        if fs.exists(path):
            fs.rm(path, recursive=True)
    else:
        shutil.rmtree(case.target, ignore_errors=True)


def measure(case: Case, address: tuple[str, int] | None, direct: dict[str, Any] | None) -> Any:
    """Run the case; return its record (status ok, error or mismatch)."""
    make, dask_input = WRITERS[case.writer]
    direct_case = replace(case, storage_options=direct)  # clearing and checking
    vol = volumes.load(replace(case, block_shape=case.shards if dask_input else None))
    record: dict[str, Any] = asdict(case) | {
        "status": "error",
        "message": "",
        "nbytes": volumes.nbytes(case),
        "fingerprint": vol.fingerprint,
        "datagen_s": vol.datagen_s,
    }
    cluster = child.MeasuredCluster(case.workers) if case.workers else None
    try:
        data = vol.data if cluster is None else cluster.persisted(vol.data)
        write, record["notes"] = make(case, data)
        if cluster:
            cluster.reset()
        gc.collect()
        baseline = child.rss()
        reset_ok = child.reset_peak()
        reps: list[dict[str, Any]] = []
        try:
            for _ in range(case.reps):
                clear(direct_case)
                if address:
                    control(address, "reset")
                cpu = child.process_cpu_seconds()
                start = time.perf_counter()
                write()
                wall = time.perf_counter() - start
                cpu = child.process_cpu_seconds() - cpu
                counts = control(address, "counts") if address else None
                reps.append({"wall_s": wall, "cpu_s": cpu, "proxy": counts})
        finally:
            peak = child.rss("VmHWM")
            record |= {
                "baseline_rss_mib": baseline / MIB,
                "peak_rss_mib": peak / MIB,
                "peak_delta_mib": (peak - baseline) / MIB,
                "peak_source": "VmHWM reset after data generation" if reset_ok else "ru_maxrss",
            }
            record |= cluster.read() if cluster else {}
    finally:
        if cluster:
            cluster.close()
    best = min(reps, key=lambda r: r["wall_s"])
    record |= {
        "reps_detail": reps,
        "times_s": [r["wall_s"] for r in reps],
        "best_s": best["wall_s"],
        "best_cpu_s": best["cpu_s"],
        "proxy": best["proxy"],
        "mb_per_s": record["nbytes"] / 1e6 / best["wall_s"],
        "status": "ok",
    }
    if case.writer != "put":  # the bound's PUTs write objects, not a checked array
        record["output_bytes"], problems = check(direct_case, vol)
        if problems:
            record |= {"status": "mismatch", "message": "; ".join(problems[:5])}
    return record


def main(argv: list[str] | None = None) -> int:
    """Measure the job given as JSON, print its record; exit 1 on an error or a mismatch."""
    job = json.loads((sys.argv[1:] if argv is None else argv)[0])
    case = Case.from_json(json.dumps(job["case"]))
    address = (job["control"][0], int(job["control"][1])) if job.get("control") else None
    direct = job.get("direct")
    with contextlib.redirect_stdout(sys.stderr):  # stdout carries only the record
        try:
            record = measure(case, address, direct)
        except Exception as exc:
            record = asdict(case) | {"status": "error", "message": repr(exc)}
            record["traceback_tail"] = traceback.format_exc().strip().splitlines()[-4:]
        finally:
            with contextlib.suppress(Exception):
                clear(replace(case, storage_options=direct))
    print(json.dumps(record, default=str))
    return 1 if record["status"] in ("error", "mismatch") else 0


def run(
    case: Case, address: tuple[str, int] | None, direct: dict[str, Any] | None, timeout: float
) -> dict[str, Any]:
    """Run the case in a fresh ``python -m benchmarks.object_store_child``; return its record."""
    job = json.dumps({"case": asdict(case), "control": address, "direct": direct})
    cmd = [sys.executable, "-m", "benchmarks.object_store_child", job]
    root = Path(__file__).resolve().parent.parent
    try:
        proc = subprocess.run(
            cmd, cwd=root, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return asdict(case) | {"status": "error", "message": f"timed out after {timeout:.0f} s"}
    lines = proc.stdout.strip().splitlines()
    with contextlib.suppress(IndexError, ValueError):
        return dict(json.loads(lines[-1]))
    tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
    return asdict(case) | {"status": "error", "message": f"exit {proc.returncode}: {tail}"}


if __name__ == "__main__":
    from benchmarks.object_store_child import main as child_main

    sys.exit(child_main())
