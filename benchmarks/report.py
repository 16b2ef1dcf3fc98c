"""Tables of benchmark results: throughput, memory, and ratios to the anchors."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from benchmarks.data import BLOCK_CASES, CODECS

Result = dict[str, Any]

BUSY_WARN = 0.10
"""Share of the cores used by other processes above which the report warns."""

RATIO_ANCHORS: tuple[tuple[str, str, bool], ...] = (
    # (column title, anchor writer, anchor is measured per block case)
    ("/encode-only", "encode", False),
    ("/zarrs", "zarrs", True),
    ("/dask to_zarr", "dask", True),
    ("/raw-write", "raw", False),
)


def find(results: Sequence[Result], writer: str, codec: str, blocks: str | None) -> Result | None:
    """Return the successful result of one case, if any.

    Parameters
    ----------
    results : sequence of dict
        Result records from ``run_one``.
    writer, codec : str
        Writer and codec setting names.
    blocks : str or None
        Block case name, or None for writers measured once on NumPy data.

    Returns
    -------
    dict or None
        The record with ``status == "ok"``, else None.
    """
    for r in results:
        if (r["writer"], r["codec"], r["blocks"], r["status"]) == (writer, codec, blocks, "ok"):
            return r
    return None


SHARDPIPE_WRITERS = ("shardpipe", "shardpipe-nofsync")
"""Writers whose throughput is divided by the anchors'."""


def ratio_rows(results: Sequence[Result]) -> list[Result]:
    """Compute shardpipe throughput divided by each anchor's, per codec and block case.

    The raw-write anchor is codec independent (measured once, uncompressed) and
    is only compared with uncompressed shardpipe runs.

    Parameters
    ----------
    results : sequence of dict
        Result records.

    Returns
    -------
    list of dict
        One row per measured (shardpipe writer, codec, blocks) with keys ``writer``,
        ``codec``, ``blocks`` and one
        ratio (float or None) per anchor writer name.
    """
    rows: list[Result] = []
    for writer, codec, blocks in itertools.product(SHARDPIPE_WRITERS, CODECS, BLOCK_CASES):
        sp = find(results, writer, codec, blocks)
        if sp is None:
            continue
        row: Result = {"writer": writer, "codec": codec, "blocks": blocks}
        for _, anchor, per_blocks in RATIO_ANCHORS:
            anchor_codec = "none" if anchor == "raw" else codec
            if anchor == "raw" and codec != "none":
                ref = None
            else:
                ref = find(results, anchor, anchor_codec, blocks if per_blocks else None)
            row[anchor] = sp["mb_per_s"] / ref["mb_per_s"] if sp and ref else None
        rows.append(row)
    return rows


def _fmt(value: float | None, spec: str) -> str:
    """Format a number, or ``-`` for missing values."""
    return "-" if value is None else format(value, spec)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], left: Sequence[int]) -> str:
    """Render a plain-text table; columns listed in ``left`` are left-aligned."""
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            str(c).ljust(w) if i in left else str(c).rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(header), rule, *(line(r) for r in rows)])


def throughput_table(results: Sequence[Result]) -> str:
    """Render the per-case table: MB/s, fraction of encode-only, memory, output size.

    Parameters
    ----------
    results : sequence of dict
        Result records.

    Returns
    -------
    str
        The table.
    """
    header = (
        "codec",
        "writer",
        "blocks",
        "MB/s",
        "best s",
        "cpu s",
        "busy%",
        "x enc",
        "peak MiB",
        "+peak MiB",
        "out MiB",
        "status",
    )
    rows = []
    for r in results:
        ok = r["status"] == "ok"
        enc = find(results, "encode", r["codec"], None)
        frac = r["mb_per_s"] / enc["mb_per_s"] if ok and enc else None
        out = r.get("output_bytes")
        others = r.get("best_others_cpu_share")
        rows.append(
            (
                r["codec"],
                r["label"],
                r["blocks"] or "numpy",
                _fmt(r.get("mb_per_s") if ok else None, ".1f"),
                _fmt(r.get("best_s") if ok else None, ".3f"),
                _fmt(r.get("best_cpu_s") if ok else None, ".3f"),
                _fmt(100 * others if ok and others is not None else None, ".0f"),
                _fmt(frac, ".2f"),
                _fmt(r.get("peak_rss_mib") if ok else None, ".0f"),
                _fmt(r.get("peak_delta_mib") if ok else None, ".0f"),
                _fmt(out / 2**20 if ok and out else None, ".1f"),
                r["status"],
            )
        )
    return _table(header, rows, left=(0, 1, 2, len(header) - 1))


def ratio_table(results: Sequence[Result]) -> str:
    """Render shardpipe's throughput ratios against the anchors.

    Parameters
    ----------
    results : sequence of dict
        Result records.

    Returns
    -------
    str
        The table (``-`` where shardpipe or the anchor has no result).
    """
    header = ("writer", "codec", "blocks", *(title for title, _, _ in RATIO_ANCHORS))
    rows = [
        (
            row["writer"],
            row["codec"],
            row["blocks"],
            *(_fmt(row[a], ".2f") for _, a, _ in RATIO_ANCHORS),
        )
        for row in ratio_rows(results)
    ]
    return _table(header, rows, left=(0, 1, 2))


def notes_text(results: Sequence[Result]) -> str:
    """List the cases' notes (merged across codecs) and any non-ok status message.

    Parameters
    ----------
    results : sequence of dict
        Result records.

    Returns
    -------
    str
        One line per distinct note or message.
    """
    codecs_by_note: dict[tuple[str, str], list[str]] = {}
    cases_by_problem: dict[tuple[str, str, str], list[str]] = {}
    for r in results:
        blocks = r["blocks"] or "numpy"
        for note in r.get("notes", []):
            note_key = (f"{r['label']} [{blocks}]", note)
            codecs_by_note.setdefault(note_key, []).append(r["codec"])
        if r["status"] != "ok":
            key = (r["label"], r["status"].upper(), str(r.get("message")))
            cases_by_problem.setdefault(key, []).append(f"{r['codec']}/{blocks}")
    lines = [
        f"  {case} ({', '.join(codecs)}): {note}" for (case, note), codecs in codecs_by_note.items()
    ]
    lines += [
        f"  {label} {status} ({', '.join(cases)}): {message}"
        for (label, status, message), cases in cases_by_problem.items()
    ]
    return "\n".join(lines)


def contention_warning(results: Sequence[Result]) -> str:
    """Return a warning if other processes used the CPUs during some timed write.

    Parameters
    ----------
    results : sequence of dict
        Result records.

    Returns
    -------
    str
        Empty, or a line starting with a newline naming the worst case.
    """
    shares = [
        (r["best_others_cpu_share"], f"{r['label']} [{r['codec']}, {r['blocks'] or 'numpy'}]")
        for r in results
        if r["status"] == "ok" and r.get("best_others_cpu_share") is not None
    ]
    if not shares or max(shares)[0] <= BUSY_WARN:
        return ""
    share, case = max(shares)
    return (
        f"\nWARNING: other processes used up to {100 * share:.0f}% of the cores during a "
        f"timed write ({case}); wall-clock MB/s are unreliable, compare cpu s instead."
    )


def render(results: Sequence[Result], meta: Result) -> str:
    """Render the whole report.

    Parameters
    ----------
    results : sequence of dict
        Result records.
    meta : dict
        Run description (shape, machine, versions; see ``__main__``).

    Returns
    -------
    str
        Title, throughput table, ratio table and notes.
    """
    title = (
        f"volume {tuple(meta['shape'])} uint16 = {meta['nbytes'] / 1e6:.1f} MB raw, "
        f"shards {tuple(meta['shards'])}, inner chunks {tuple(meta['chunks'])}, "
        f"{meta['cpu_count']} cores, {meta['mem_total_gib']:.0f} GiB RAM, best of {meta['reps']}"
    )
    legend = (
        "MB/s = 1e6 bytes of raw array data per second of the timed write (best rep); "
        "x enc = MB/s / encode-only MB/s (same codec);\n"
        "cpu s = CPU seconds of the writer's process in that rep (all threads); "
        "busy% = share of all cores other processes used meanwhile;\n"
        "peak MiB = peak RSS of the case's process; +peak MiB = peak minus RSS "
        "after data generation (the volume itself is in the baseline)."
    )
    ratio_legend = (
        "shardpipe MB/s divided by the anchor's MB/s, same codec (and same "
        "blocks for zarrs/dask); raw-write only for codec none. >1: shardpipe faster."
    )
    return "\n\n".join(
        [
            title + contention_warning(results),
            throughput_table(results),
            legend,
            "Ratios: " + ratio_legend,
            ratio_table(results),
            "Notes:\n" + (notes_text(results) or "  (none)"),
        ]
    )
