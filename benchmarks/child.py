"""Run one case in a fresh process: ``python -m benchmarks.child CASE-JSON``.

The child imports the writer's libraries, builds the case's volume
(untimed), prepares the write, on ``case.workers`` starts a LocalCluster,
records its RSS (the baseline) and resets the kernel's peak-RSS mark
(``/proc/self/clear_refs``), then times ``case.reps`` writes, each after
emptying the target and ``os.sync()``. Per rep it records wall time, its own
CPU seconds (all threads), the share of all cores other processes used
(``/proc/stat``; for an ``s3://`` target, minus the S3 server, which is the
parent process and whose CPU is reported apart; on a cluster, minus the
workers); on a cluster, the workers' CPU and peak RSS (their ``VmHWM``, reset
likewise, and psutil samples every 20 ms). Then it verifies the output
(untimed), deletes it and prints one JSON record on stdout. :func:`run` is
the parent's side.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks import volumes
from benchmarks.cases import Case
from benchmarks.writers import WRITERS, WriterUnsupported, plan_note, warm_up

REPO_ROOT = Path(__file__).resolve().parent.parent
MIB = 1 << 20


def process_cpu_seconds() -> float:
    """User + system CPU seconds of this process so far (all threads)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def machine_busy_seconds() -> float | None:
    """Non-idle CPU seconds of all processes since boot (``/proc/stat``), or None."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = stat.readline().split()
    except OSError:
        return None
    ticks = [int(v) for v in fields[1:9]]  # user nice system idle iowait irq softirq steal
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def parent_cpu_seconds() -> float | None:
    """CPU seconds the parent process (the S3 server) has used, or None."""
    try:
        with open(f"/proc/{os.getppid()}/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def rss(field: str = "VmRSS") -> int:
    """``VmRSS`` (now) or ``VmHWM`` (peak since :func:`reset_peak`) of this process, in bytes.

    ``ru_maxrss`` where ``/proc/self/status`` is missing.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return maxrss if sys.platform == "darwin" else maxrss * 1024


def run_module_child(module: str, small: bool, *child: str) -> Any:
    """Run ``python -m module [--small] --child *child`` from the repository; return its JSON.

    The child prints one JSON document as its last line of output (the
    standalone benchmarks' ``--child`` mode); a failing child raises.
    """
    command = [sys.executable, "-m", module, *(["--small"] if small else []), "--child", *child]
    done = subprocess.run(command, check=True, capture_output=True, text=True, cwd=REPO_ROOT)
    return json.loads(done.stdout.strip().splitlines()[-1])


def reset_peak() -> bool:
    """Reset the kernel's peak-RSS mark to the current RSS; False where impossible."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as clear_refs:
            clear_refs.write("5")
    except OSError:
        return False
    return True


def warm_up_worker() -> None:
    """Import on a worker what the writes use, so its baseline RSS includes it."""
    import zarr  # noqa: F401

    import benchmarks.volumes  # noqa: F401
    import shardpipe  # noqa: F401


class MeasuredCluster:
    """A LocalCluster of single-threaded workers (no memory limit) whose memory is measured."""

    def __init__(self, n_workers: int) -> None:
        from distributed import Client, LocalCluster

        self.cluster = LocalCluster(
            n_workers=n_workers,
            threads_per_worker=1,
            processes=True,
            memory_limit=0,
            dashboard_address=None,
        )
        self.client = Client(self.cluster)
        self.client.run(warm_up_worker)
        self.done = threading.Event()

    def reset(self) -> None:
        """Record the workers' RSS and CPU, reset their peak marks, start sampling."""
        import psutil  # type: ignore[import-untyped]

        self.baseline = max(self.client.run(rss).values())
        self.cpu = sum(self.client.run(process_cpu_seconds).values())
        self.client.run(reset_peak)
        procs = [psutil.Process(pid) for pid in self.client.run(os.getpid).values()]
        self.sampled = {p.pid: 0 for p in procs}

        def sample() -> None:
            while not self.done.wait(0.02):
                for proc in procs:  # a worker that died is reported by the computation
                    with contextlib.suppress(Exception):
                        now = proc.memory_info().rss
                        self.sampled[proc.pid] = max(self.sampled[proc.pid], now)

        self.sampler = threading.Thread(target=sample, daemon=True)
        self.sampler.start()

    def persisted(self, x: Any) -> Any:
        """``x`` with its blocks computed into the workers' memory (shipped from here once)."""
        from distributed import futures_of, wait

        held = self.client.persist(x)
        wait(held)
        for future in futures_of(held):
            if future.status == "error":
                future.result()  # raises what the block's task raised
        return held

    def cpu_seconds(self) -> float:
        """CPU seconds the workers have used so far, all together."""
        return float(sum(self.client.run(process_cpu_seconds).values()))

    def read(self) -> dict[str, float]:
        """Stop sampling; return the largest worker's figures (MiB) and all workers' CPU s.

        ``worker_peak_delta_mib`` is the largest peak minus the largest RSS before the reps;
        ``worker_peaks_mib`` lists every worker's peak.
        """
        self.done.set()
        self.sampler.join()
        peaks = [v for _, v in sorted(self.client.run(rss, "VmHWM").items())]
        peak = max(peaks)
        return {
            "worker_peaks_mib": [v / MIB for v in peaks],  # each worker's, by address
            "worker_baseline_rss_mib": self.baseline / MIB,
            "worker_peak_rss_mib": peak / MIB,
            "worker_peak_delta_mib": (peak - self.baseline) / MIB,
            "worker_sampled_peak_mib": max(self.sampled.values(), default=0) / MIB,
            "worker_cpu_s": sum(self.client.run(process_cpu_seconds).values()) - self.cpu,
        }

    def close(self) -> None:
        """Stop sampling, close the client and the cluster."""
        self.done.set()
        self.client.close()
        self.cluster.close()


def remover(case: Case) -> Callable[[], None]:
    """A function deleting the case's target (and its scratch directory) if they exist.

    For an ``s3://`` target it holds one s3fs instance, created now.
    """
    if case.target.startswith("s3://"):
        import fsspec

        fs, path = fsspec.url_to_fs(case.target, **(case.storage_options or {}))
        return lambda: fs.rm(path, recursive=True) if fs.exists(path) else None

    def clear() -> None:
        for path in (Path(case.target), Path(f"{case.target}.scratch")):
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)

    return clear


def time_reps(
    case: Case,
    write: Callable[[], object],
    clear: Callable[[], None],
    helpers: Callable[[], float | None] | None = None,
) -> tuple[dict[str, Any], object]:
    """Time ``case.reps`` writes; return per-rep and fastest-rep figures, and the last result.

    ``helpers`` gives the CPU seconds so far of the processes working for the
    write (a cluster's workers); by default, for an ``s3://`` target, the S3
    server's. Their CPU is not counted as other processes'.
    """
    cores = os.cpu_count() or 1
    s3 = case.target.startswith("s3://")
    server = helpers or (parent_cpu_seconds if s3 else lambda: None)
    runs = []
    result = None
    for _ in range(case.reps):
        clear()
        os.sync()
        server_start = server()
        own_start, busy_start = process_cpu_seconds(), machine_busy_seconds()
        start = time.perf_counter()
        result = write()
        wall = time.perf_counter() - start
        own = process_cpu_seconds() - own_start
        busy, server_end = machine_busy_seconds(), server()
        used = None if server_start is None or server_end is None else server_end - server_start
        others = None
        if busy is not None and busy_start is not None and wall > 0:
            others = max(0.0, busy - busy_start - own - (used or 0)) / (wall * cores)
        runs.append((wall, own, others, used))
    best = min(runs, key=lambda run: run[0])
    figures = {
        "times_s": [r[0] for r in runs],
        "cpu_s": [r[1] for r in runs],
        "others_cpu_share": [r[2] for r in runs],
        "best_s": best[0],
        "best_cpu_s": best[1],
        "best_others_cpu_share": best[2],
        "server_cpu_s": best[3] if s3 else None,
        "best_workers_cpu_s": best[3] if helpers else None,
    }
    return figures, result


def stub(case: Case, status: str, message: str) -> dict[str, Any]:
    """A record of a case without measurements."""
    return asdict(case) | {"status": status, "message": message, "notes": []}


def measure(case: Case) -> dict[str, Any]:
    """Run the case; return its record (status ok, unavailable, unsupported, error, mismatch)."""
    writer = WRITERS[case.writer]
    try:
        for module in writer.needs:
            importlib.import_module(module)
    except Exception as exc:
        return stub(case, "unavailable", f"{module} not importable: {exc!r}")
    nbytes = volumes.nbytes(case)
    clear = remover(case)
    vol = volumes.load(case)
    record = stub(case, "error", "") | {
        "dtype": volumes.DTYPES[case.volume].name,
        "nbytes": nbytes,
        "fingerprint": vol.fingerprint,
        "datagen_s": vol.datagen_s,
    }
    cluster = MeasuredCluster(case.workers) if case.workers else None
    try:
        write, notes = writer.make(case, vol.data)
        record["notes"] += notes
        if case.warm_up:
            warm_up(case)
        if cluster:
            cluster.reset()
        gc.collect()
        baseline = rss()
        reset_ok = reset_peak()
        try:
            helpers = cluster.cpu_seconds if cluster else None
            figures, written = time_reps(case, write, clear, helpers)
        except WriterUnsupported as exc:
            return record | {"status": "unsupported", "message": str(exc)}
        except Exception as exc:
            tail = traceback.format_exc().strip().splitlines()[-3:]
            return record | {"message": repr(exc), "traceback_tail": tail}
        finally:
            peak = rss("VmHWM")
            children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
            record |= {
                "baseline_rss_mib": baseline / MIB,
                "peak_rss_mib": peak / MIB,
                "peak_delta_mib": (peak - baseline) / MIB,
                "peak_source": "VmHWM reset after data generation" if reset_ok else "ru_maxrss",
                "children_peak_rss_mib": children / MIB,
            }
            record |= cluster.read() if cluster else {}
    finally:
        if cluster:
            cluster.close()
    record |= figures | {"mb_per_s": nbytes / 1e6 / figures["best_s"], "status": "ok"}
    if writer.check:
        record["output_bytes"], problems = writer.check(case, vol, written)
        if problems:
            record |= {"status": "mismatch", "message": "; ".join(problems)}
    if case.shardpipe_checks and case.writer.startswith("shardpipe"):  # after the measurement
        record["notes"].insert(0, plan_note(case, vol.data))
    return record


def main(argv: list[str] | None = None) -> int:
    """Measure the case given as JSON, print its record; exit 1 on an error or a mismatch."""
    case = Case.from_json((sys.argv[1:] if argv is None else argv)[0])
    with contextlib.redirect_stdout(sys.stderr):  # stdout carries only the record
        try:
            record = measure(case)
        except Exception as exc:
            record = stub(case, "error", repr(exc))
            record["traceback_tail"] = traceback.format_exc().strip().splitlines()[-3:]
        finally:
            with contextlib.suppress(Exception):  # a failed cleanup must not lose the record
                remover(case)()
    print(json.dumps(record, default=str))
    if record["status"] in ("error", "mismatch"):
        print(f"{record['status'].upper()}: {record['message']}", file=sys.stderr)
        return 1
    return 0


def run(case: Case, timeout: float) -> dict[str, Any]:
    """Run ``case`` in a fresh ``python -m benchmarks.child`` and return its record.

    An ``error`` record if the child timed out or exited without printing one.
    """
    cmd = [sys.executable, "-m", "benchmarks.child", case.to_json()]
    try:
        proc = subprocess.run(
            cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return stub(case, "error", f"timed out after {timeout:.0f} s")
    lines = proc.stdout.strip().splitlines()
    with contextlib.suppress(IndexError, ValueError):
        return dict(json.loads(lines[-1]))
    tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
    return stub(case, "error", f"exit {proc.returncode} without a result: {tail}")


if __name__ == "__main__":
    # Run the module under its own name, so that what is sent to cluster workers
    # (warm_up_worker, the probes) is pickled by reference, not by value.
    from benchmarks.child import main as child_main

    sys.exit(child_main())
