"""The reports of the four benchmarks, from the child records, and the run's description.

* suite: per volume, one row per case (MB/s, best s, cpu s, busy%, x
  encode-only, peak and +peak MiB, output MiB), the durable limits, then
  shardpipe's MB/s divided by each like-for-like anchor's and the verdicts of
  issue #11's targets (:mod:`benchmarks.targets`);
* large-shard: one row per case (worker columns on a LocalCluster), then the
  throughput ratio, the generation share and the PASS/FAIL memory verdicts;
* s3: one row per case (with the S3 server's CPU), then shardpipe / dask;
* cluster: one row per case (scheduler, each worker's peak), then the
  cluster / threaded ratios and the verdict of the 2-worker target.

Each starts with a title (and a warning if other processes took more than
10 % of the cores during a write) and ends with the cases' notes and problems.
"""

from __future__ import annotations

import os
import platform
import subprocess
from collections.abc import Callable, Sequence
from importlib import metadata
from typing import Any

from dask.utils import parse_bytes

from benchmarks import targets, volumes
from benchmarks.cases import CHUNKS, CODECS, SHARDS, Case
from benchmarks.child import MIB, REPO_ROOT
from benchmarks.targets import find, ok

Record = dict[str, Any]
Column = tuple[str, Callable[[Record], str]]

BUSY_WARN = 0.10  # share of the cores other processes may use before the report warns
PACKAGES = ("numpy", "zarr", "dask", "distributed", "numcodecs", "tensorstore", "zarrs", "cubed")
SUITE_LEGEND = """\
MB/s = 1e6 bytes of raw array data per second of the timed write (best rep); x enc = MB/s / \
encode-only MB/s (same codec and volume);
cpu s = CPU seconds of the writer's process in that rep (all threads); busy% = share of all cores \
other processes used meanwhile;
peak MiB = peak RSS of the case's process; +peak MiB = peak minus RSS after data generation (the \
volume itself is in the baseline).
durable limit = raw bytes / max(encode-only s, fsynced raw-write s) of the codec (none: the \
fsynced raw-write s alone).

Ratios: shardpipe MB/s divided by the anchor's MB/s, same volume and codec (and same blocks for \
zarrs/dask), like with like: shardpipe (no fsync) against the writers and limits that do not \
fsync, shardpipe (durable) against the fsynced raw writes and the durable limit; raw-write only \
for codec none. >1: shardpipe faster. Verdicts: issue #11's targets, then issue #30's.
format-work limit = cut, encode (numcodecs), crc32c, index + crc32c, one writev per shard \
(durable: + fsync, rename, directory fsync), one task per shard per core; ts+crc = tensorstore \
with crc32c after each inner chunk (shardpipe's chain)."""
LARGE_SHARD_LEGEND = """
MB/s = 1e6 raw bytes per second of the best rep, data generation included; cpu s = CPU of the \
case's process in that rep; busy% = share of all cores other processes (not workers) used;
peak MiB = peak RSS of the case's process over all reps; +peak = minus its RSS before them \
(libraries, graph, warm-up);
wrk = largest over the workers: CPU s per rep (mean), peak RSS (VmHWM), peak minus RSS before the \
reps; psutil = largest RSS sampled.
"""
CLUSTER_LEGEND = """
MB/s = 1e6 raw bytes per second of the best rep, data generation included; cpu s = CPU of the \
case's own process (on a cluster: the client) in that rep; wrk cpu s = all workers' CPU per rep \
(mean); busy% = share of all cores other processes (not the workers) used during the best rep;
peak MiB per worker = peak RSS over the reps of each worker process (threaded: the one process); \
+peak = largest peak minus RSS before the reps (after the warm-up); client MiB = the client \
process's peak.
"""
CLUSTER_TARGET = (2, 0.85)  # issue #11: shardpipe on 2 workers >= 0.85 x the threaded scheduler
S3_LEGEND = """
MB/s = 1e6 raw bytes per second of the best rep; cpu s = CPU of the writer's process in that rep;
server cpu s = CPU of the moto server in that rep; busy% = share of all cores that other processes
(not the server) used then; stored MiB = bytes in the bucket after the write.

shardpipe MB/s / dask to_zarr MB/s (>1: shardpipe faster):"""


def fmt(value: float | None, spec: str) -> str:
    """Format a number, or ``-`` for a missing one."""
    return "-" if value is None else format(value, spec)


def num(key: str, spec: str, scale: float = 1.0) -> Callable[[Record], str]:
    """A cell of a numeric field of ok records (``-`` otherwise)."""
    return lambda r: fmt(r[key] * scale if ok(r) and r.get(key) is not None else None, spec)


def text(key: str) -> Callable[[Record], str]:
    """A cell showing a field as it is."""
    return lambda r: str(r[key])


def value(key: str, spec: str = ".2f") -> Callable[[Record], str]:
    """A cell of a numeric field of a derived row (``-`` if None)."""
    return lambda r: fmt(r.get(key), spec)


def table(results: Sequence[Record], columns: Sequence[Column], left: Sequence[int]) -> str:
    """Render a plain-text table; the columns at the indices ``left`` are left-aligned."""
    header = [title for title, _ in columns]
    rows = [[cell(r) for _, cell in columns] for r in results]
    widths = [max(len(c) for c in col) for col in zip(header, *rows, strict=True)]
    lefts = {i % len(columns) for i in left}

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(w) if i in lefts else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    return "\n".join([line(header), "  ".join("-" * w for w in widths), *map(line, rows)])


def name(r: Record) -> str:
    """A case's name in progress lines and warnings."""
    suite = r["bench"] == "suite"
    where = f"{r['volume']}, {r['codec']}, {r['blocks'] or 'numpy'}"
    return f"{r['label']} [{where}]" if suite else r["label"]


def title(results: Sequence[Record], meta: Record, what: str) -> str:
    """The report's first line, and a warning if other processes used the cores.

    A LocalCluster's workers (and the S3 server) are not counted as other
    processes; its nannies are.
    """
    line = (
        f"volume {tuple(meta['shape'])} {meta['dtype']} = {meta['nbytes'] / 1e6:.1f} MB raw"
        f"{what}, {meta['cpu_count']} cores, {meta['mem_total_gib']:.0f} GiB RAM, "
        f"best of {meta['reps']}"
    )
    shares = [
        (r["best_others_cpu_share"], name(r))
        for r in results
        if ok(r) and r.get("best_others_cpu_share") is not None
    ]
    if not shares or max(shares)[0] <= BUSY_WARN:
        return line
    share, case = max(shares)
    return (
        f"{line}\nWARNING: other processes used up to {100 * share:.0f}% of the cores during a "
        f"timed write ({case}); wall-clock MB/s are unreliable, compare cpu s instead."
    )


def notes(results: Sequence[Record]) -> str:
    """The cases' notes (merged across codecs in the suite) and every problem."""
    suite = any(r["bench"] == "suite" for r in results)
    by_note: dict[tuple[str, str], list[str]] = {}
    by_problem: dict[tuple[str, str], list[str]] = {}
    for r in results:
        where = f"{r['label']} [{r['blocks'] or 'numpy'}]" if suite else r["label"]
        for note in r.get("notes", []):
            by_note.setdefault((where, note), []).append(r["codec"])
        if not ok(r):
            key = (f"{r['label']} {r['status'].upper()}", str(r.get("message")))
            by_problem.setdefault(key, []).append(f"{r['codec']}/{r['blocks'] or 'numpy'}")
    lines = [
        f"  {case}{' (' + ', '.join(tags) + ')' if suite else ''}: {text}"
        for group in (by_note, by_problem)
        for (case, text), tags in group.items()
    ]
    return "Notes:\n" + ("\n".join(lines) or "  (none)")


def run_meta(bench: str, options: dict[str, Any], case: Case) -> Record:
    """Describe the run: benchmark, options, data (of ``case``), machine, versions, commit."""

    def git(*args: str) -> str:
        cmd = ["git", "-C", str(REPO_ROOT), *args]
        return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout.strip()

    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "bench": bench,
        **options,
        "nbytes": volumes.nbytes(case),
        "dtype": volumes.DTYPES[case.volume].name,
        "shards": list(SHARDS),
        "chunks": list(CHUNKS),
        "cpu_count": os.cpu_count(),
        "mem_total_gib": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": versions,
        "git_commit": git("rev-parse", "--short", "HEAD") or None,
        "shardpipe_uncommitted_changes": bool(git("status", "--porcelain", "--", "shardpipe")),
    }


def suite_volume(results: Sequence[Record], volume: str) -> str:
    """One volume's part of the suite report: table, durable limits, ratios, verdicts, notes."""
    mine = [r for r in results if r["volume"] == volume]

    def x_encode(r: Record) -> str:
        enc = find(results, "encode", r["codec"], None, volume)
        return fmt(r["mb_per_s"] / enc["mb_per_s"] if ok(r) and enc else None, ".2f")

    columns: list[Column] = [
        ("codec", lambda r: r["codec"]),
        ("writer", lambda r: r["label"]),
        ("blocks", lambda r: r["blocks"] or "numpy"),
        ("MB/s", num("mb_per_s", ".1f")),
        ("best s", num("best_s", ".3f")),
        ("cpu s", num("best_cpu_s", ".3f")),
        ("busy%", num("best_others_cpu_share", ".0f", 100)),
        ("x enc", x_encode),
        ("peak MiB", num("peak_rss_mib", ".0f")),
        ("+peak MiB", num("peak_delta_mib", ".0f")),
        ("out MiB", num("output_bytes", ".1f", 1 / MIB)),
        ("status", lambda r: r["status"]),
    ]
    enc = find(results, "encode", "zstd1", None, volume)
    kept = f": zstd-1 keeps {enc['output_bytes'] / enc['nbytes']:.1%}" if enc else ""
    lines = [f"== volume {volume}{kept} ==", "", table(mine, columns, left=(0, 1, 2, -1)), ""]
    limits = []
    for codec in CODECS:
        if limit := targets.durable_limit(results, codec, volume):
            fsynced = f"fsynced raw writes {limit['raw_fsync_s']:.3f} s"
            if limit["encode_s"] is not None:
                fsynced = f"max(encode-only {limit['encode_s']:.3f} s, {fsynced})"
            limits.append(
                f"  {codec}: {limit['mb_per_s']:.1f} MB/s = raw bytes / {fsynced}, bound by "
                f"{limit['bound']}"
            )
    lines += ["durable limits:", *(limits or ["  (none: needs encode and raw-fsync)"])]
    ratios: list[Column] = [(key, text(key)) for key in ("writer", "codec", "blocks")]
    ratios += [(head, value(anchor)) for anchor, (head, _, _) in targets.ANCHORS.items()]
    rows = targets.ratio_rows(mine)
    if rows:
        lines += ["", table(rows, ratios, left=(0, 1, 2))]
    checks = [v for v in targets.verdicts(mine) if v["verdict"] != "n/a"]
    for issue in (11, 30):
        theirs = [v for v in checks if v["issue"] == issue]
        if theirs:
            lines += ["", f"issue #{issue} targets ({volume}):", *map(targets.verdict_line, theirs)]
    return "\n".join([*lines, "", notes(mine)])


def suite(results: Sequence[Record], meta: Record) -> str:
    """The suite's report: title, legend, then each volume's part (:func:`suite_volume`)."""
    head = title(results, meta, f", shards {SHARDS}, inner chunks {CHUNKS}")
    parts = [suite_volume(results, v) for v in targets.volumes_of(results)]
    return "\n\n".join([head, SUITE_LEGEND, *parts])


def bound_check(r: Record) -> str | None:
    """PASS/FAIL of a shardpipe write's peak RSS (largest worker's) against 2 x its max_mem."""
    if not ok(r) or r["writer"] != "shardpipe" or not r["max_mem"]:
        return None
    peak = r.get("worker_peak_rss_mib") or r["peak_rss_mib"]
    return "PASS" if peak * MIB < 2 * parse_bytes(r["max_mem"]) else "FAIL"


def large_shard(results: Sequence[Record], meta: Record) -> str:
    """The large-shard report: title, one row per case, legend, verdicts, notes."""
    cluster = meta["cluster"]
    columns: list[Column] = [
        ("case", lambda r: r["label"]),
        ("shards", lambda r: "x".join(map(str, r["shards"]))),
        ("max_mem", lambda r: r["max_mem"] or "default"),
        ("MB/s", num("mb_per_s", ".1f")),
        ("best s", num("best_s", ".2f")),
        ("cpu s", num("best_cpu_s", ".2f")),
    ]
    if cluster:
        columns += [
            ("wrk cpu s", lambda r: num("worker_cpu_s", ".2f", 1 / r["reps"])(r)),
            ("wrk peak MiB", num("worker_peak_rss_mib", ".0f")),
            ("wrk +peak", num("worker_peak_delta_mib", ".0f")),
            ("psutil MiB", num("worker_sampled_peak_mib", ".0f")),
        ]
    columns.append(("busy%", num("best_others_cpu_share", ".0f", 100)))
    columns += [
        ("peak MiB", num("peak_rss_mib", ".0f")),
        ("+peak MiB", num("peak_delta_mib", ".0f")),
        ("out MiB", num("output_bytes", ".1f", 1 / MIB)),
        ("<2x max_mem", lambda r: bound_check(r) or "-"),
        ("status", lambda r: r["status"]),
    ]
    sched = f"LocalCluster {cluster} workers x 1 thread" if cluster else "threaded scheduler"
    what = f" (synthetic, generated in the graph), inner chunks {CHUNKS}, Dask blocks "
    what += f"{tuple(meta['blocks'])}, zstd level 1, {sched}"
    lines = [title(results, meta, what) + "\n", table(results, columns, left=(0, 1, 2, -1))]
    lines.append(LARGE_SHARD_LEGEND)
    gen, one, fit = ([r if ok(r) else None for r in results] + [None] * 3)[:3]  # cases' order
    if one and fit:
        lines.append(
            f"throughput one shard / fitting shards: {one['mb_per_s'] / fit['mb_per_s']:.2f}"
        )
    if gen and one:
        share = gen["best_s"] / one["best_s"]
        lines.append(
            f"data generation alone: {gen['mb_per_s']:.0f} MB/s ({share:.0%} of the one-shard "
            "write's time)"
        )
    if one:
        bound = 2 * parse_bytes(meta["max_mem"]) / MIB
        who = f"max over {cluster} workers" if cluster else "whole process, threaded"
        peak = one.get("worker_peak_rss_mib") or one["peak_rss_mib"]
        delta = one["worker_peak_delta_mib" if cluster else "peak_delta_mib"]
        lines.append(
            f"memory bound, one shard of {one['nbytes'] / MIB:.0f} MiB under max_mem="
            f"{meta['max_mem']}: peak RSS ({who}) {peak:.0f} MiB vs 2 x max_mem = {bound:.0f} "
            f"MiB: {'PASS' if peak < bound else 'FAIL'}  (+peak {delta:.0f} MiB: "
            f"{'PASS' if delta < bound else 'FAIL'})"
        )
        if meta["small"]:
            lines.append(
                "  (--small: interpreter and libraries alone exceed this bound; judge +peak)"
            )
    return "\n".join([*lines, "", notes(results)])


def s3(results: Sequence[Record], meta: Record) -> str:
    """The s3 report: title, one row per case, legend, shardpipe / dask, notes."""
    columns: list[Column] = [
        ("blocks", lambda r: r["blocks"]),
        ("writer", lambda r: r["writer"]),
        ("Dask blocks", lambda r: "x".join(map(str, r["block_shape"]))),
        ("max_mem", lambda r: r["max_mem"] or ("default" if r["writer"] == "shardpipe" else "-")),
        ("MB/s", num("mb_per_s", ".1f")),
        ("best s", num("best_s", ".2f")),
        ("cpu s", num("best_cpu_s", ".2f")),
        ("server cpu s", num("server_cpu_s", ".2f")),
        ("busy%", num("best_others_cpu_share", ".0f", 100)),
        ("peak MiB", num("peak_rss_mib", ".0f")),
        ("+peak MiB", num("peak_delta_mib", ".0f")),
        ("stored MiB", num("output_bytes", ".1f", 1 / MIB)),
        ("status", lambda r: r["status"]),
    ]
    what = f", shards {SHARDS}, inner chunks {CHUNKS}, zstd level 1, moto S3 server in the "
    what += "parent process, threaded scheduler"
    lines = [title(results, meta, what) + "\n", table(results, columns, left=(0, 1, 2, 3, -1))]
    lines.append(S3_LEGEND)
    rates = {(r["blocks"], r["writer"]): r["mb_per_s"] for r in results if ok(r)}
    for blocks in dict.fromkeys(r["blocks"] for r in results):
        sp, dk = rates.get((blocks, "shardpipe")), rates.get((blocks, "dask"))
        lines.append(f"  {blocks:<11} {fmt(sp / dk if sp and dk else None, '.2f')}")
    return "\n".join([*lines, "", notes(results)])


def cluster_ratios(results: Sequence[Record]) -> list[Record]:
    """MB/s on each LocalCluster over MB/s on the threaded scheduler, per writer."""
    rates = {(r["writer"], r["workers"]): r["mb_per_s"] for r in results if ok(r)}
    rows = []
    for n in sorted({r["workers"] for r in results} - {0}):
        row: Record = {"workers": n}
        for writer in ("generate", "shardpipe-nofsync"):
            on_n, threaded = rates.get((writer, n)), rates.get((writer, 0))
            row[writer] = on_n / threaded if on_n and threaded else None
        rows.append(row)
    return rows


def cluster(results: Sequence[Record], meta: Record) -> str:
    """The cluster report: title, one row per case, legend, cluster / threaded ratios, notes."""

    def worker_peaks(r: Record) -> str:
        if not ok(r):
            return "-"
        if not r["workers"]:
            return f"{r['peak_rss_mib']:.0f}"
        return " / ".join(f"{v:.0f}" for v in r["worker_peaks_mib"])

    columns: list[Column] = [
        ("case", lambda r: r["label"]),
        ("MB/s", num("mb_per_s", ".1f")),
        ("best s", num("best_s", ".2f")),
        ("cpu s", num("best_cpu_s", ".2f")),
        ("wrk cpu s", lambda r: num("worker_cpu_s", ".2f", 1 / r["reps"])(r)),
        ("busy%", num("best_others_cpu_share", ".0f", 100)),
        ("peak MiB per worker", worker_peaks),
        (
            "+peak",
            lambda r: num("worker_peak_delta_mib" if r["workers"] else "peak_delta_mib", ".0f")(r),
        ),
        ("client MiB", lambda r: num("peak_rss_mib", ".0f")(r) if r["workers"] else "-"),
        ("out MiB", num("output_bytes", ".1f", 1 / MIB)),
        ("status", lambda r: r["status"]),
    ]
    blocks = "x".join(map(str, results[0]["block_shape"])) if results else "-"
    what = f" (synthetic, generated in the graph), Dask blocks = shards {blocks}, inner chunks "
    what += f"{CHUNKS}, zstd level 1, storage_options={{'fsync': False}}, workers x 1 thread"
    lines = [title(results, meta, what) + "\n", table(results, columns, left=(0, -1))]
    lines += [CLUSTER_LEGEND, "MB/s on the cluster / MB/s threaded:"]
    for row in cluster_ratios(results):
        gen, sp = fmt(row["generate"], ".2f"), fmt(row["shardpipe-nofsync"], ".2f")
        n = row["workers"]
        lines.append(f"  {n} worker{'s' if n > 1 else ''}: generate only {gen}, shardpipe {sp}")
    n, threshold = CLUSTER_TARGET
    value = next(
        (r["shardpipe-nofsync"] for r in cluster_ratios(results) if r["workers"] == n), None
    )
    if value is not None:
        verdict = "PASS" if value >= threshold else "FAIL"
        lines.append(
            f"issue #11 target: shardpipe on {n} workers / threaded {value:.2f}  >= {threshold}  "
            f"{verdict}"
        )
    return "\n".join([*lines, "", notes(results)])


REPORTS = {"suite": suite, "large-shard": large_shard, "s3": s3, "cluster": cluster}
"""The report of each benchmark: ``(records, meta) -> text``."""
