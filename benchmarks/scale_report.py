"""The report of ``python -m benchmarks scale`` and its paper estimate (part d).

:func:`estimate` turns the measured figures into the cost of a 1 PiB write
on N workers, each as fast as the threads scheduler measured here in part
(c) (``threads`` threads; a "worker" is that much machine):

* aggregate MB/s = N x the N GiB null-store write's MB/s; hours for 1 PiB;
* shards/s and tasks/s the scheduler must sustain (tasks per shard from the
  1 PiB plan when it finished, else from the plan of part (c)'s write, same
  layout), and the share of one scheduler core they take at
  ``--task-cost-us`` per task (an assumption; Dask documents about 200 µs
  per task for its local scheduler);
* waves: as many as the 1 PiB plan of part (a) says (else ``ceil(shards /
  wave_shards)``) where it says its wave size (see
  :func:`benchmarks.scale_child.job_facts`), else unknown; the tasks one
  wave holds on average;
* client memory: the peak RSS of the 1 PiB plan (part a) and of the first
  minutes of the 1 PiB write on the threads scheduler (part b), as measured.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

GiB, TiB, PiB = 2**30, 2**40, 2**50
SHARD_NBYTES = 1024**3


def size_name(nbytes: int) -> str:
    """``1 PiB``, ``4 TiB``, ``64 GiB``: the largest binary unit that keeps a number >= 1."""
    for unit, scale in (("PiB", PiB), ("TiB", TiB), ("GiB", GiB)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes} B"


def gib(nbytes: float | None) -> str:
    """Bytes as GiB with two decimals, or a dash."""
    return "-" if nbytes is None else f"{nbytes / GiB:.2f}"


def num(value: float | None, spec: str) -> str:
    """A number formatted, or a dash."""
    return "-" if value is None else format(value, spec)


def facts(record: dict[str, Any] | None) -> dict[str, Any]:
    """What a child's job said of itself ({} if nothing)."""
    return dict(((record or {}).get("result") or {}).get("facts") or {})


def _ok_plan(payload: dict[str, Any], nbytes: int) -> dict[str, Any] | None:
    return next(
        (r for r in payload.get("plan", []) if r["nbytes"] == nbytes and r["status"] == "ok"),
        None,
    )


def _big(payload: dict[str, Any]) -> dict[str, Any] | None:
    return next((r for r in payload.get("null", []) if r["role"] == "big"), None)


def estimate(payload: dict[str, Any], workers: list[int], task_cost_us: float) -> dict[str, Any]:
    """The paper estimate of a 1 PiB write on each number of ``workers`` (see the module)."""
    big = _big(payload)
    plan = _ok_plan(payload, PiB)
    shards = PiB // SHARD_NBYTES
    known = facts(plan) if plan else {}
    basis = "the 1 PiB plan"
    if not (known.get("num_tasks") and known.get("n_shards")):
        known, basis = facts(big), "the plan of part (c)'s write (same layout)"
    tasks_per_shard = (
        known["num_tasks"] / known["n_shards"]
        if known.get("num_tasks") and known.get("n_shards")
        else None
    )
    # a smaller array's waves are cut to its own size: only the 1 PiB plan's count
    wave_shards: int | None = facts(plan).get("wave_shards") if plan else None
    waves: int | None = facts(plan).get("n_waves") if plan else None
    if wave_shards and not waves:
        waves = math.ceil(shards / wave_shards)
    rate: float | None = big.get("mb_per_s") if big else None
    threads = ((big or {}).get("result") or {}).get("threads")
    start = payload.get("start") or {}
    out: dict[str, Any] = {
        "nbytes": PiB,
        "shards": shards,
        "tasks_per_shard": tasks_per_shard,
        "tasks_per_shard_from": basis if tasks_per_shard else None,
        "tasks": tasks_per_shard * shards if tasks_per_shard else None,
        "worker_mb_per_s": rate,
        "worker_threads": threads,
        "wave_shards": wave_shards,
        "waves": waves,
        "wave_tasks": shards / waves * tasks_per_shard if waves and tasks_per_shard else None,
        "task_cost_us": task_cost_us,
        "client_plan_peak_rss": plan["peak_rss"] if plan else None,
        "client_write_peak_rss": start.get("peak_rss") if start.get("nbytes") == PiB else None,
        "rows": [],
    }
    for n in workers if rate else []:
        speed = n * (rate or 0.0)
        seconds = PiB / 1e6 / speed
        tasks_per_s = out["tasks"] / seconds if out["tasks"] else None
        out["rows"].append(
            {
                "workers": n,
                "mb_per_s": speed,
                "hours": seconds / 3600,
                "shards_per_s": shards / seconds,
                "tasks_per_s": tasks_per_s,
                "scheduler_cores": tasks_per_s * task_cost_us / 1e6 if tasks_per_s else None,
                "wave_s": seconds / out["waves"] if out["waves"] else None,
            }
        )
    return out


def _plan_section(records: list[dict[str, Any]]) -> list[str]:
    lines = ["(a) plan: prepare_write + repr(job), fresh process each", ""]
    head = f"{'size':>8} {'shape':>24} {'status':>28} {'plan s':>8} {'repr s':>7}"
    lines.append(head + f" {'CPU s':>7} {'peak GiB':>9} {'shards':>11} {'tasks':>12} {'waves':>6}")
    for r in records:
        result, f = r.get("result") or {}, facts(r)
        lines.append(
            f"{size_name(r['nbytes']):>8} {tuple(r['shape'])!s:>24} {r['status'][:28]:>28} "
            f"{num(result.get('plan_s'), '.2f'):>8} {num(result.get('repr_s'), '.2f'):>7} "
            f"{num(r.get('cpu_s'), '.1f'):>7} {gib(r['peak_rss']):>9} "
            f"{num(f.get('n_shards'), ','):>11} {num(f.get('num_tasks'), ','):>12} "
            f"{num(f.get('n_waves'), ','):>6}"
        )
    lines.append("targets (1 PiB): plan < 30 s and < 2 GiB")
    return lines


def _start_section(r: dict[str, Any]) -> list[str]:
    first = r.get("first_shard_s")
    watched = r.get("watched_s")
    return [
        f"(b) start a {size_name(r['nbytes'])} write {tuple(r['shape'])} to a local folder "
        "(threads, fsync), watch, kill",
        "",
        f"status: {r['status']}; watched {num(watched, '.0f')} s after the call",
        "time to first shard: " + (f"{first:.1f} s" if first is not None else "none seen"),
        f"peak RSS: {gib(r['peak_rss'])} GiB; shards published by the end: {r['published']}",
        "published by (s after the call): " + (_steps(r.get("published_samples") or []) or "-"),
        f"CPU s of the child: {num(r.get('cpu_s'), '.1f')}",
        "targets (1 PiB): first shard < 60 s, peak RSS < 3 GiB",
    ]


def _steps(samples: list[list[float]], most: int = 12) -> str:
    """``"1 at 48.1, 3 at 52.0, ..."``: where a [seconds, count] series goes up."""
    steps, last = [], 0.0
    for seconds, count in samples:
        if count > last:
            steps.append(f"{count:.0f} at {seconds:.1f}")
            last = count
    return ", ".join(steps[:most]) + (", ..." if len(steps) > most else "")


def _null_section(records: list[dict[str, Any]]) -> list[str]:
    lines = ["(c) into the counting null store (threads), each in a fresh process", ""]
    lines.append(
        f"{'role':>5} {'size':>8} {'status':>10} {'s':>7} {'MB/s':>7} {'MB/CPU-s':>9} "
        f"{'kept %':>7} {'shards':>7} {'peak GiB':>9} {'load':>5}"
    )
    for r in records:
        result = r.get("result") or {}
        kept = 100 * result["stored_nbytes"] / r["nbytes"] if result.get("stored_nbytes") else None
        lines.append(
            f"{r['role']:>5} {size_name(r['nbytes']):>8} {r['status'][:10]:>10} "
            f"{num(result.get('seconds'), '.1f'):>7} {num(r.get('mb_per_s'), '.0f'):>7} "
            f"{num(r.get('mb_per_cpu_s'), '.0f'):>9} {num(kept, '.1f'):>7} "
            f"{num(result.get('objects'), ','):>7} {gib(r['peak_rss']):>9} "
            f"{r['load_before'][0]:>5.2f}"
        )
    ratio = null_ratios(records)
    if ratio:
        lines.append(
            f"ratio big/1 GiB (median of {ratio['base_runs']}): {ratio['wall']:.3f} by wall time, "
            f"{ratio['cpu']:.3f} by CPU time; target >= 0.95: "
            + ("PASS" if ratio["wall"] >= 0.95 else "FAIL")
        )
    return lines


def null_ratios(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The big write's MB/s (and MB per CPU-s) over the 1 GiB runs' medians."""
    base = [r for r in records if r["role"] == "base" and r.get("mb_per_s")]
    big = next((r for r in records if r["role"] == "big" and r.get("mb_per_s")), None)
    if not base or big is None:
        return None
    return {
        "wall": big["mb_per_s"] / statistics.median(r["mb_per_s"] for r in base),
        "cpu": big["mb_per_cpu_s"] / statistics.median(r["mb_per_cpu_s"] for r in base),
        "base_runs": len(base),
    }


def _estimate_section(e: dict[str, Any]) -> list[str]:
    lines = ["(d) on paper: 1 PiB on N workers, each as fast as part (c)'s big write", ""]
    if not e["rows"]:
        return [*lines, "no estimate: part (c) did not measure a rate"]
    lines += [
        f"per worker: {e['worker_mb_per_s']:.0f} MB/s ({e['worker_threads']} threads); "
        f"{e['shards']:,} shards of 1 GiB",
        "tasks: "
        + (
            f"{e['tasks']:,.0f} ({e['tasks_per_shard']:.2f} per shard, from "
            f"{e['tasks_per_shard_from']})"
            if e["tasks"]
            else "unknown"
        ),
        "waves: "
        + (
            f"{e['waves']:,} of up to {e['wave_shards']:,} shards ({e['wave_tasks']:,.0f} tasks "
            "each on average)"
            if e["waves"]
            else "unknown (from the 1 PiB plan of part (a) only, where the job says them)"
        ),
        f"client memory: plan {gib(e['client_plan_peak_rss'])} GiB; threads write, first "
        f"minutes: {gib(e['client_write_peak_rss'])} GiB (distributed: plan + one wave's "
        "graph, not measured here)",
        "",
        f"{'workers':>8} {'GB/s':>8} {'hours':>8} {'shards/s':>9} {'tasks/s':>9} "
        f"{'sched cores':>12} {'s/wave':>8}",
    ]
    for row in e["rows"]:
        lines.append(
            f"{row['workers']:>8} {row['mb_per_s'] / 1000:>8.1f} {row['hours']:>8.1f} "
            f"{row['shards_per_s']:>9.1f} {num(row['tasks_per_s'], ',.0f'):>9} "
            f"{num(row['scheduler_cores'], '.2f'):>12} {num(row['wave_s'], '.1f'):>8}"
        )
    lines.append(f"sched cores: tasks/s x {e['task_cost_us']:.0f} µs per task (an assumption)")
    return lines


def report(payload: dict[str, Any]) -> str:
    """The readable report of a run."""
    meta = payload["meta"]
    lines = [
        f"shardpipe scale benchmark, {meta['started']}, commit {meta['git_commit']}"
        + (" (+ uncommitted shardpipe changes)" if meta["shardpipe_uncommitted_changes"] else ""),
        f"{meta['cpu_count']} CPUs, {meta['mem_total_gib']:.1f} GiB RAM; load average at start "
        f"{meta['load_at_start'][0]:.2f}, at end {meta.get('load_at_end', [0.0])[0]:.2f}",
        f"uint8, shards {meta['shards']}, inner chunks {meta['chunks']}, Dask blocks "
        f"{meta['blocks']}, max_mem {meta['max_mem']}, zstd-{meta['zstd_level']} + CRC32C",
        "",
    ]
    sections = []
    if "plan" in payload:
        sections.append(_plan_section(payload["plan"]))
    if "start" in payload:
        sections.append(_start_section(payload["start"]))
    if "null" in payload:
        sections.append(_null_section(payload["null"]))
    if "estimate" in payload:
        sections.append(_estimate_section(payload["estimate"]))
    for section in sections:
        lines += [*section, ""]
    return "\n".join(lines)
