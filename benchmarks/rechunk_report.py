"""The tables of the rechunk sweep (:mod:`benchmarks.rechunk_sweep`), one per case.

Per record: wall seconds (best rep), the ratios ``anchor s / writer s`` to the
limit (its ``limit_s``: the parts' sum over the cores), for a plan of two
passes to the two-pass limit (its ``two_pass_limit_s``: the limit and a raw
copy), tensorstore, dask
(tasks) and dask p2p of the same case in the same run (above 1: faster than
the anchor), the process's peak RSS above its RSS before the write, for a
cluster the largest worker's too, and shardpipe's plan (passes, blocks per
pass, reads, summed read amplification).
"""

from __future__ import annotations

from typing import Any

ANCHORS = (
    ("limit", "limit"),
    ("tensorstore", "tensorstore"),
    ("dask", "dask"),
    ("p2p", "dask-p2p"),
)
"""Ratio columns: (heading, writer whose seconds are the numerator)."""


def anchor_seconds(records: list[dict[str, Any]], case: str, writer: str) -> float | None:
    """Seconds of ``writer`` on ``case`` (``limit_s`` for the limit), or None if it did not run."""
    for r in records:
        if r["case"] == case and r["writer"] == writer and r.get("status") == "ok":
            value = r.get("limit_s") if writer == "limit" else r.get("seconds")
            return float(value) if value else None
    return None


def ratios(records: list[dict[str, Any]], record: dict[str, Any]) -> dict[str, float | None]:
    """``anchor s / record's s`` for each anchor of :data:`ANCHORS` (None where unknown)."""
    seconds = record.get("seconds") if record.get("status") == "ok" else None
    out: dict[str, float | None] = {}
    for heading, writer in ANCHORS:
        anchor = anchor_seconds(records, record["case"], writer)
        out[heading] = anchor / seconds if anchor and seconds else None
    return out


def two_pass_ratio(limit: dict[str, Any] | None, record: dict[str, Any]) -> float | None:
    """``two-pass limit s / record's s`` for a plan of two passes (None for others)."""
    seconds = record.get("seconds") if record.get("status") == "ok" else None
    if not limit or not limit.get("two_pass_limit_s") or not seconds:
        return None
    if record.get("passes", 1) < 2:
        return None
    return float(limit["two_pass_limit_s"]) / float(seconds)


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def plan_cell(record: dict[str, Any]) -> str:
    """shardpipe's plan in a few words: per pass its blocks; reads and amplification."""
    plan = record.get("plan")
    if not plan:
        return ""
    blocks = " then ".join(
        f"{p['blocks']:,} x {tuple(p['block_shape'])}"
        + (f" into {tuple(p['into'])}" if p.get("into") else "")
        for p in plan
    )
    return (
        f"{record['passes']} pass{'es' if record['passes'] > 1 else ''}: {blocks}; "
        f"{record['reads']:,} reads, {record['amplification']:.2f}x"
    )


def table(records: list[dict[str, Any]], descriptions: dict[str, str]) -> str:
    """The report: per case its description, the limit's parts and one Markdown table."""
    lines: list[str] = []
    for case, description in descriptions.items():
        rows = [r for r in records if r["case"] == case]
        if not rows:
            continue
        lines += ["", f"### {description}", ""]
        limit = next((r for r in rows if r["writer"] == "limit" and r.get("parts_s")), None)
        if limit:
            parts = ", ".join(f"{k} {v:.2f}" for k, v in limit["parts_s"].items())
            lines.append(
                f"limit: {limit['limit_s']:.2f} s = ({parts}) s on one thread / "
                f"{limit['cores']} cores"
            )
            if limit.get("copy_parts_s"):
                copy = ", ".join(f"{k} {v:.2f}" for k, v in limit["copy_parts_s"].items())
                lines += [
                    "",
                    f"two-pass limit: {limit['two_pass_limit_s']:.2f} s = the limit's parts "
                    f"and a raw copy's ({copy}) s on one thread / {limit['cores']} cores",
                ]
            lines.append("")
        lines += [
            "| writer | max_mem | s | x limit | x two-pass limit | x tensorstore | x dask | x p2p "
            "| +peak MiB | worker +peak MiB | shardpipe plan | status |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
        ]
        for r in rows:
            ok = r.get("status") == "ok"
            ratio = ratios(records, r)
            status = "ok" if ok else f"**{r.get('status')}**: {r.get('message', '')}"
            seconds = _num(r.get("seconds") if ok else None, ".2f")
            lines.append(
                f"| {r['writer']} | {r['budget']} | {seconds} "
                + f"| {_num(ratio['limit'], '.2f')} "
                + f"| {_num(two_pass_ratio(limit, r), '.2f')} "
                + "".join(f"| {_num(ratio[h], '.2f')} " for h, _ in ANCHORS[1:])
                + f"| {_num(r.get('peak_delta_mib'), '.0f')} "
                f"| {_num(r.get('worker_peak_delta_mib'), '.0f')} | {plan_cell(r)} | {status} |"
            )
    return "\n".join(lines).lstrip("\n")
