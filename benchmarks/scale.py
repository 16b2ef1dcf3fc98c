"""Scale simulation (issue #12): ``python -m benchmarks scale [--small] [options]``.

Four parts, each child in a fresh ``python -m benchmarks.scale_child``
process whose memory this process samples (``VmRSS`` every 0.5 s, and the
kernel's ``VmHWM`` peak at the end); a child that passes its time limit or
the RSS limit is killed and reported as such, never waited for:

* ``plan`` (a): ``shardpipe.prepare_write`` and ``repr(job)`` of a 1 PiB and
  a 10 PiB ``uint8`` array (shards (1024,)*3, inner chunks (128,)*3, Dask
  blocks (512,)*3, ``max_mem="768MB"``) from a lazy source: time, CPU, peak RSS;
* ``start`` (b): ``shardpipe.to_sharded_zarr`` of a 1 PiB lazy source to a
  local temporary folder (threads scheduler, fsync as default): seconds from
  the call to the first shard file under ``c/``, RSS over the first
  ``--watch`` seconds, shards published over time (every 0.5 s once the
  first is there); then the child is killed
  and the folder deleted (sooner if the disk's free space runs low);
* ``null`` (c): N GiB (default 64) through ``to_sharded_zarr`` into the
  counting null store (:mod:`shardpipe.testing.null_store`), and the same
  source at 1 GiB (before and after it): MB/s of each and the ratio;
* ``estimate`` (d): a 1 PiB write on N workers, on paper, from the figures
  measured (:mod:`benchmarks.scale_report`).

The source is :func:`benchmarks.scale_child.source` (a ``map_blocks`` array
copied from a small seeded table; zstd-1 keeps about 65 %). The codecs are
zstd level 1 (``--zstd-level``; shardpipe's own default is zarr's, level 3)
and shardpipe's default CRC32C of every inner chunk. MB
are 10^6 bytes of raw array data; sizes are binary (1 PiB = 2^50 bytes).
The report is printed and written as JSON (default
``benchmarks/results/scale-<date>.json``; ``benchmarks/out/`` with ``--small``).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from benchmarks import scale_report
from benchmarks.child import REPO_ROOT

GiB, TiB, PiB = 2**30, 2**40, 2**50
UNITS = {"GiB": GiB, "TiB": TiB, "PiB": PiB}
SHARDS, CHUNKS, BLOCKS = (1024,) * 3, (128,) * 3, (512,) * 3
PARTS = ("plan", "start", "null", "estimate")
RESULTS = Path(__file__).resolve().parent / "results"
OUT = Path(__file__).resolve().parent / "out"
TICK, SAMPLE = 0.1, 0.5  # seconds between looks at the folder, between RSS samples
Hook = Callable[[subprocess.Popen[str], list[str]], str | None]


def parse_size(text: str) -> int:
    """``"1PiB"``, ``"4TiB"``, ``"64GiB"`` or a number of bytes."""
    for unit, scale in UNITS.items():
        if text.endswith(unit):
            return int(float(text.removesuffix(unit)) * scale)
    return int(text)


def shape_for(nbytes: int, shard: tuple[int, ...] = SHARDS) -> tuple[int, ...]:
    """A near-cubic ``uint8`` shape of whole shards for ``nbytes`` (rounded down, >= 1 shard)."""
    n = max(1, nbytes // math.prod(shard))
    best: tuple[int, ...] = (n, 1, 1)
    for a in range(1, round(n ** (1 / 3)) + 2):
        if n % a:
            continue
        rest = n // a
        for b in range(a, math.isqrt(rest) + 1):
            if rest % b == 0:
                c = rest // b
                best = min(best, tuple(sorted((a, b, c), reverse=True)), key=max)
    return tuple(s * k for s, k in zip(shard, best, strict=True))


def proc_status(pid: int, field: str) -> int | None:
    """``VmRSS`` or ``VmHWM`` of process ``pid`` in bytes, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def proc_cpu(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` so far, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_child(
    mode: str, options: dict[str, Any], timeout: float, rss_limit: int, hook: Hook | None = None
) -> dict[str, Any]:
    """Run one child, sampling its RSS; kill it on ``timeout``, the RSS limit or ``hook``.

    ``hook(proc, lines)`` is called every :data:`TICK` seconds with the
    stdout lines so far and returns a reason to stop, or None. Returns the
    child's last JSON line (if any) under ``result`` with ``status`` (``ok``,
    ``timed out``, ``over the RSS limit``, the hook's reason, or ``failed``),
    ``seconds``, ``peak_rss`` (the larger of the samples and ``VmHWM``),
    ``rss_samples`` ([seconds, bytes] pairs) and the load average.
    """
    cmd = [sys.executable, "-m", "benchmarks.scale_child", mode, json.dumps(options)]
    load_before = os.getloadavg()
    begin = time.monotonic()
    proc = subprocess.Popen(
        cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    lines: list[str] = []
    errors: list[str] = []
    readers = [
        threading.Thread(target=lambda: lines.extend(proc.stdout or ()), daemon=True),
        threading.Thread(target=lambda: errors.extend(proc.stderr or ()), daemon=True),
    ]
    for reader in readers:
        reader.start()
    samples: list[list[float]] = []
    peak, cpu, status, next_sample = 0, None, None, begin
    while proc.poll() is None:
        now = time.monotonic()
        if now >= next_sample:
            rss = proc_status(proc.pid, "VmRSS") or 0
            samples.append([round(now - begin, 2), rss])
            next_sample += SAMPLE
            if rss > rss_limit:
                status = f"over the RSS limit ({rss / GiB:.1f} GiB)"
        if status is None and now - begin > timeout:
            status = f"timed out after {timeout:.0f} s"
        if status is None and hook is not None:
            status = hook(proc, lines)
        if status is not None:
            peak = max(peak, proc_status(proc.pid, "VmHWM") or 0)
            cpu = proc_cpu(proc.pid)
            proc.kill()
            break
        time.sleep(TICK)
    proc.wait()
    for reader in readers:
        reader.join(timeout=5)
    result = None
    with contextlib.suppress(IndexError, ValueError):
        result = json.loads(lines[-1])
    if status is None:
        status = "ok" if proc.returncode == 0 and result is not None else "failed"
    peak = max([peak, *(s[1] for s in samples), (result or {}).get("peak_rss", 0)])
    return {
        "status": status,
        "seconds": time.monotonic() - begin,
        "peak_rss": peak,
        "cpu_s": cpu if cpu is not None else (result or {}).get("cpu_s"),
        "result": result,
        "stderr_tail": "".join(errors[-5:]).strip() if status == "failed" else "",
        "rss_samples": samples,
        "load_before": load_before,
        "load_after": os.getloadavg(),
    }


def run_plans(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Part (a): plan and print each size in a fresh child."""
    records = []
    for size in args.plan_sizes:
        shape = shape_for(size)
        options = {**common(args), "shape": shape, "scratch": args.scratch}
        say(f"plan {scale_report.size_name(size)} {shape} ...")
        record = run_child("plan", options, args.plan_timeout, args.rss_limit)
        record.update(nbytes=math.prod(shape), shape=shape)
        records.append(record)
        say(
            f"  {record['status']} in {record['seconds']:.1f} s, "
            f"peak {record['peak_rss'] / GiB:.2f} GiB"
        )
    return records


def published(folder: Path) -> list[Path]:
    """Shard files published under ``folder`` (temporaries start with a dot)."""
    found = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        found += [Path(root, f) for f in files if not f.startswith(".")]
    return found


def run_start(args: argparse.Namespace) -> dict[str, Any]:
    """Part (b): start the write, watch for the first shard and the memory, kill, clean up."""
    shape = shape_for(args.start_size)
    folder = Path(tempfile.mkdtemp(prefix="shardpipe-scale-", dir=args.scratch))
    shards = folder / "volume.zarr" / "c"
    seen: dict[str, float] = {}
    counts: list[list[float]] = []  # [seconds after the call, shards published]

    def watch(proc: subprocess.Popen[str], lines: list[str]) -> str | None:
        if "called" not in seen:
            for line in lines:
                with contextlib.suppress(ValueError):
                    if json.loads(line).get("event") == "calling":
                        seen["called"] = json.loads(line)["time"]
        if "called" not in seen:
            return None
        now = time.time()
        since = now - seen["called"]
        if "first" not in seen or since - counts[-1][0] >= SAMPLE:
            n = len(published(shards)) if shards.is_dir() else 0
            if n and "first" not in seen:
                seen["first"] = now
            if n or counts:
                counts.append([round(since, 2), n])
        if since >= args.watch:
            return "watched"
        if shutil.disk_usage(folder).free < args.min_free:
            return f"stopped: under {args.min_free / GiB:.0f} GiB free on disk"
        return None

    options = {**common(args), "shape": shape, "path": str(folder / "volume.zarr")}
    say(f"start {scale_report.size_name(math.prod(shape))} {shape}, watch {args.watch:.0f} s ...")
    try:
        record = run_child("start", options, args.watch + 600, args.rss_limit, hook=watch)
        record["published"] = len(published(shards)) if shards.is_dir() else 0
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    called = seen.get("called")
    record.update(
        nbytes=math.prod(shape),
        shape=shape,
        first_shard_s=seen["first"] - called if called and "first" in seen else None,
        watched_s=(time.time() - called) if called else None,
        published_samples=counts,
    )
    first = record["first_shard_s"]
    say(
        f"  {record['status']}: first shard "
        + (f"after {first:.1f} s" if first is not None else "never")
        + f", peak {record['peak_rss'] / GiB:.2f} GiB, {record['published']} published"
    )
    return record


def run_null(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Part (c): the N GiB write and the 1 GiB one (before and after it) into the null store."""
    big, base = shape_for(args.null_size), shape_for(GiB)
    order = [("base", base), ("big", big)] + [("base", base)] * max(0, args.base_reps - 1)
    records = []
    for role, shape in order:
        nbytes = math.prod(shape)
        timeout = 120 + 60 * nbytes / GiB
        options = {**common(args), "shape": shape}
        say(f"null {role} {scale_report.size_name(nbytes)} {shape} ...")
        record = run_child("null", options, timeout, args.rss_limit)
        record.update(role=role, shape=shape, nbytes=nbytes)
        if record["status"] == "ok":
            record["mb_per_s"] = nbytes / 1e6 / record["result"]["seconds"]
            record["mb_per_cpu_s"] = nbytes / 1e6 / record["result"]["cpu_s"]
            say(f"  {record['mb_per_s']:.0f} MB/s, {record['mb_per_cpu_s']:.0f} MB per CPU-s")
        else:
            say(f"  {record['status']}")
        records.append(record)
    return records


def common(args: argparse.Namespace) -> dict[str, Any]:
    """The write options every child shares."""
    return {
        "shards": SHARDS,
        "chunks": CHUNKS,
        "blocks": BLOCKS,
        "max_mem": args.max_mem,
        "seed": args.seed,
        "zstd_level": args.zstd_level,
    }


def say(text: str) -> None:
    """Progress on stderr."""
    print(text, file=sys.stderr, flush=True)


def run_meta(args: argparse.Namespace) -> dict[str, Any]:
    """The run's options, machine, versions and commit."""

    def git(*argv: str) -> str:
        cmd = ["git", "-C", str(REPO_ROOT), *argv]
        return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout.strip()

    versions = {}
    for name in ("shardpipe", "dask", "zarr", "numpy", "numcodecs"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions[name] = metadata.version(name)
    options = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    return {
        "bench": "scale",
        **options,
        "shards": SHARDS,
        "chunks": CHUNKS,
        "blocks": BLOCKS,
        "dtype": "uint8",
        "scheduler": "threads",
        "cpu_count": os.cpu_count(),
        "mem_total_gib": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GiB,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": versions,
        "git_commit": git("rev-parse", "--short", "HEAD") or None,
        "shardpipe_uncommitted_changes": bool(git("status", "--porcelain", "--", "shardpipe")),
        "started": datetime.datetime.now().isoformat(timespec="seconds"),
        "load_at_start": os.getloadavg(),
    }


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The options (see ``--help``); ``--small`` changes the defaults to a smoke test."""
    small = "--small" in argv
    p = argparse.ArgumentParser(prog="python -m benchmarks scale", description=__doc__)
    add = p.add_argument
    add("--small", action="store_true", help="smoke test: plan 4 TiB, watch 60 s, write 2 GiB")
    add("--parts", default=",".join(PARTS), help="subset of %(default)s")
    add("--plan-sizes", default="4TiB" if small else "1PiB,10PiB", help="(a) default %(default)s")
    add("--plan-timeout", type=float, default=900, help="(a) seconds per plan (%(default)s)")
    add("--start-size", default="1PiB", help="(b) size of the write started (%(default)s)")
    add("--watch", type=float, default=60 if small else 120, help="(b) seconds (%(default)s)")
    add("--null-size", default="2GiB" if small else "64GiB", help="(c) size (%(default)s)")
    add("--base-reps", type=int, default=2, help="(c) 1 GiB writes, around the big one (2)")
    add("--workers", default="10,100,1000", help="(d) cluster sizes of the estimate")
    add("--task-cost-us", type=float, default=200.0, help="(d) scheduler time per task, µs")
    add("--max-mem", default="768MB", help="max_mem of every write (%(default)s)")
    add("--seed", type=int, default=0, help="seed of the source's table")
    add("--zstd-level", type=int, default=1, help="zstd level of the inner chunks (1)")
    half_ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    add("--rss-limit", default=f"{min(12 * GiB, half_ram) / GiB:.0f}GiB", help="kill above")
    add("--min-free", default="20GiB", help="(b) stop when the disk has less free")
    add("--scratch", type=Path, default=None, help="(b) folder for the write (a temp folder)")
    add("--json", type=Path, default=None, help="where the JSON goes")
    args = p.parse_args(argv)
    args.parts = [part for part in args.parts.split(",") if part]
    if unknown := sorted(set(args.parts) - set(PARTS)):
        p.error(f"--parts: unknown {unknown}; choose from {list(PARTS)}")
    args.plan_sizes = [parse_size(s) for s in args.plan_sizes.split(",") if s]
    args.start_size, args.null_size = parse_size(args.start_size), parse_size(args.null_size)
    args.rss_limit, args.min_free = parse_size(args.rss_limit), parse_size(args.min_free)
    args.workers = [int(n) for n in args.workers.split(",") if n]
    if args.json is None:
        today = datetime.date.today().isoformat()
        args.json = OUT / f"scale-small-{today}.json" if small else RESULTS / f"scale-{today}.json"
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the parts asked for, print the report, write the JSON; 1 if a child failed."""
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    meta = run_meta(args)
    payload: dict[str, Any] = {"meta": meta}
    if "plan" in args.parts:
        payload["plan"] = run_plans(args)
    if "start" in args.parts:
        payload["start"] = run_start(args)
    if "null" in args.parts:
        payload["null"] = run_null(args)
        payload["null_ratios"] = scale_report.null_ratios(payload["null"])
    if "estimate" in args.parts:
        payload["estimate"] = scale_report.estimate(payload, args.workers, args.task_cost_us)
    meta["load_at_end"] = os.getloadavg()
    print(scale_report.report(payload))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(payload, indent=1, default=str) + "\n")
    say(f"JSON: {args.json}")
    records = [*payload.get("plan", []), *payload.get("null", [])]
    records += [payload["start"]] if "start" in payload else []
    return 1 if any(r["status"] == "failed" for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
