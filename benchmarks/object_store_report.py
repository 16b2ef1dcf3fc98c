"""The table of the object-store benchmark (:mod:`benchmarks.object_store`).

Per setting and writer: MB/s of the raw volume (best rep), the ratio to the
setting's bound (the slower of its 32-connection PUTs and shardpipe's local
write: ``max(PUT s, CPU s)``) and to tensorstore, the requests of the best
rep by method (from the proxy), the connections it opened, the most open at
once, and the child's peak RSS (VmHWM after data generation; on a cluster,
the largest worker's).
"""

from __future__ import annotations

from typing import Any

METHODS = ("PUT", "POST", "GET", "HEAD", "DELETE")


def bound_seconds(records: list[dict[str, Any]], setting: str) -> float | None:
    """``max(PUT s of the setting, shardpipe's local write s)``, or None if either is missing."""
    put = [r["best_s"] for r in records if r["writer"] == "put" and r["setting"] == setting]
    cpu = [r["best_s"] for r in records if r["writer"] == "local" and r.get("status") == "ok"]
    if not put or not cpu:
        return None
    return float(max(put[0], cpu[0]))


def rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One summary row per record: the table's figures, as numbers."""
    out = []
    for r in records:
        setting = r.get("setting", "")
        ok = r.get("status") == "ok"
        bound = bound_seconds(records, setting)
        ts = [
            x["best_s"]
            for x in records
            if x["writer"] == "tensorstore" and x.get("setting") == setting and x["status"] == "ok"
        ]
        proxy = r.get("proxy") or {}
        methods = proxy.get("methods") or {}
        workers_peak = r.get("worker_peak_rss_mib")
        out.append(
            {
                "setting": setting,
                "label": r["label"],
                "writer": r["writer"],
                "status": r.get("status"),
                "mb_per_s": r.get("mb_per_s") if ok else None,
                "best_s": r.get("best_s") if ok else None,
                "times_s": r.get("times_s"),
                "to_bound": bound / r["best_s"] if ok and bound else None,
                "to_tensorstore": ts[0] / r["best_s"] if ok and ts else None,
                "requests": {m: methods.get(m, 0) for m in METHODS} if proxy else None,
                "operations": proxy.get("operations"),
                "connections": proxy.get("connections"),
                "open_peak": proxy.get("open_peak"),
                "proxy_cpu_s": proxy.get("proxy_cpu_s"),
                "cpu_s": r.get("best_cpu_s"),
                "peak_rss_mib": r.get("peak_rss_mib"),
                "peak_delta_mib": r.get("peak_delta_mib"),
                "worker_peak_rss_mib": workers_peak,
                "output_bytes": r.get("output_bytes"),
                "notes": r.get("notes"),
                "message": r.get("message"),
            }
        )
    return out


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def table(records: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    """The report: a header, then one Markdown table of every row."""
    shape = "x".join(map(str, meta["shape"]))
    shards = "x".join(map(str, meta["shards"]))
    lines = [
        f"object store: {shape} uint16 (noisy), shards {shards}, chunks 64^3, zstd-1 + crc32c; "
        f"best of {meta['reps']}; shardpipe {meta['shardpipe']} ({meta['shardpipe_path']})",
        "",
        "| setting | writer | MB/s | x bound | x tensorstore | PUT | POST | GET | HEAD | DELETE "
        "| conns (peak open) | CPU s | peak RSS MiB | status |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
        "| ---: | --- |",
    ]
    for row in rows(records):
        req = row["requests"] or {}
        counts = [str(req[m]) if row["requests"] else "-" for m in METHODS]
        conns = f"{row['connections']} ({row['open_peak']})" if row["requests"] else "-"
        rss = _num(row["peak_rss_mib"], ".0f")
        if row["worker_peak_rss_mib"] is not None:
            rss += f" (worker {row['worker_peak_rss_mib']:.0f})"
        status = row["status"] if row["status"] == "ok" else f"{row['status']}: {row['message']}"
        lines.append(
            f"| {row['setting']} | {row['label']} | {_num(row['mb_per_s'], '.1f')} "
            f"| {_num(row['to_bound'], '.2f')} | {_num(row['to_tensorstore'], '.2f')} "
            f"| {' | '.join(counts)} | {conns} | {_num(row['cpu_s'], '.1f')} | {rss} | {status} |"
        )
    sizes = [r["output_bytes"] for r in records if r.get("output_bytes") and r["writer"] != "local"]
    if sizes:
        raw = records[0].get("nbytes") or 1
        lines.append(f"\nstored: {sizes[0] / 2**20:.1f} MiB ({sizes[0] / raw:.1%} of raw)")
    return "\n".join(lines)
