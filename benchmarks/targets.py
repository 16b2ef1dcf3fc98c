"""The suite's limits and ratios, and the targets of issue #11 as PASS/FAIL verdicts.

Like is compared with like: shardpipe without fsync (``shardpipe-nofsync``)
with the writers and limits that do not fsync (encode-only, raw writes, zarrs,
dask ``to_zarr``), durable shardpipe (``shardpipe``, every shard fsynced) with
the durable limits. The **durable limit** of a codec is what a durable writer
could reach if it overlapped encoding and fsynced writing perfectly: the raw
array bytes over the larger of the encode-only time and the fsynced raw-write
time of that codec's shard sizes (for ``none``, over the fsynced raw-write
time alone). Every figure is per volume.

Issue #30 judges shardpipe against the **format-work limit**
(:mod:`benchmarks.format_limit`: the work any writer of the array must do,
CRC32C, index and write included; durable or not) and against TensorStore
with the same chain (``crc32c`` after each inner chunk): :data:`TARGETS_30`.
Issue #11's :data:`TARGETS` stay, so the history reads on.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any, NamedTuple

from benchmarks.cases import BLOCK_CASES, CODECS

Record = dict[str, Any]

SHARDPIPE_WRITERS = ("shardpipe", "shardpipe-nofsync")  # divided by the anchors
ANCHORS = {  # anchor: (column title, measured per block case, shardpipe writer it is for)
    "encode": ("/encode-only", False, "shardpipe-nofsync"),
    "zarrs": ("/zarrs", True, "shardpipe-nofsync"),
    "dask": ("/dask to_zarr", True, "shardpipe-nofsync"),
    "raw": ("/raw-write", False, "shardpipe-nofsync"),  # measured under codec none only
    "raw-fsync": ("/raw-fsync", False, "shardpipe"),
    "durable": ("/durable limit", False, "shardpipe"),  # derived, see durable_limit
    "format": ("/format", False, "shardpipe-nofsync"),
    "format-fsync": ("/format durable", False, "shardpipe"),
    "tensorstore-crc": ("/ts+crc", False, "shardpipe-nofsync"),
    "tensorstore-crc-fsync": ("/ts+crc durable", False, "shardpipe"),
}
ANCHOR_NAMES = {
    "encode": "encode-only",
    "zarrs": "dask to_zarr + zarrs",
    "dask": "dask to_zarr",
    "raw": "raw writes (no fsync)",
    "raw-fsync": "fsynced raw writes",
    "durable": "durable limit",
    "format": "format-work limit",
    "format-fsync": "format-work limit (durable)",
    "tensorstore-crc": "tensorstore + crc32c",
    "tensorstore-crc-fsync": "tensorstore + crc32c (durable)",
}


class Target(NamedTuple):
    """One target of issue #11: shardpipe's MB/s over an anchor's, at least ``threshold``."""

    writer: str
    codec: str
    blocks: str
    anchor: str
    threshold: float


TARGETS = (
    Target("shardpipe", "zstd1", "aligned", "durable", 0.85),
    Target("shardpipe-nofsync", "zstd1", "aligned", "encode", 0.95),
    Target("shardpipe-nofsync", "zstd1", "aligned", "zarrs", 1.3),
    Target("shardpipe-nofsync", "zstd1", "misaligned", "encode", 0.85),
    Target("shardpipe-nofsync", "zstd1", "misaligned", "dask", 1.5),
    Target("shardpipe-nofsync", "zstd1", "slabs", "encode", 0.85),
    Target("shardpipe-nofsync", "zstd1", "slabs", "dask", 1.5),
    Target("shardpipe-nofsync", "none", "aligned", "raw", 0.8),
    Target("shardpipe", "none", "aligned", "raw-fsync", 0.85),
)
"""Issue #11's targets."""

TARGETS_30 = (
    Target("shardpipe-nofsync", "zstd1", "aligned", "format", 0.95),
    Target("shardpipe-nofsync", "zstd1", "aligned", "tensorstore-crc", 1.2),
    Target("shardpipe-nofsync", "zstd1", "aligned", "zarrs", 1.3),
    Target("shardpipe", "zstd1", "aligned", "format-fsync", 0.90),
    Target("shardpipe-nofsync", "none", "aligned", "format", 0.90),
    Target("shardpipe", "none", "aligned", "format-fsync", 0.90),
    Target("shardpipe-nofsync", "zstd1", "misaligned", "format", 0.85),
    Target("shardpipe-nofsync", "zstd1", "misaligned", "dask", 1.6),
    Target("shardpipe-nofsync", "zstd1", "slabs", "format", 0.85),
    Target("shardpipe-nofsync", "zstd1", "slabs", "dask", 1.6),
)
"""Issue #30's targets: against the format-work limit (aligned blocks) and like-for-like peers."""


def ok(r: Record) -> bool:
    """Whether the case was measured and verified."""
    return r.get("status") == "ok"


def find(
    results: Sequence[Record], writer: str, codec: str, blocks: str | None, volume: str
) -> Record | None:
    """The ok record of one suite case, if any."""
    key = (writer, codec, blocks, volume)
    found = (r for r in results if ok(r) and (r["writer"], r["codec"], r["blocks"]) == key[:3])
    return next((r for r in found if r["volume"] == volume), None)


def durable_limit(results: Sequence[Record], codec: str, volume: str) -> Record | None:
    """The durable limit of a codec on a volume (None if a measurement is missing).

    ``zstd1``: raw bytes over max(encode-only time, fsynced raw-write time of
    the zstd-1 shard sizes); ``none``: over the fsynced raw-write time.
    """
    fsynced = find(results, "raw-fsync", codec, None, volume)
    encode = find(results, "encode", codec, None, volume) if codec != "none" else None
    if not fsynced or (codec != "none" and not encode):
        return None
    seconds = max(fsynced["best_s"], encode["best_s"] if encode else 0.0)
    bound = "encode-only" if encode and encode["best_s"] >= fsynced["best_s"] else "fsynced writes"
    return {
        "codec": codec,
        "volume": volume,
        "mb_per_s": fsynced["nbytes"] / 1e6 / seconds,
        "best_s": seconds,
        "encode_s": encode["best_s"] if encode else None,
        "raw_fsync_s": fsynced["best_s"],
        "bound": bound,
    }


def durable_limits(results: Sequence[Record]) -> list[Record]:
    """The durable limit of every codec on every volume that has one."""
    pairs = itertools.product(volumes_of(results), CODECS)
    return [limit for v, c in pairs if (limit := durable_limit(results, c, v))]


def anchor_rate(
    results: Sequence[Record], anchor: str, codec: str, blocks: str, volume: str
) -> float | None:
    """MB/s of an anchor (a measured case or the durable limit) for a shardpipe case."""
    if anchor == "durable":
        limit = durable_limit(results, codec, volume)
        return limit["mb_per_s"] if limit else None
    ref = find(results, anchor, codec, blocks if ANCHORS[anchor][1] else None, volume)
    return float(ref["mb_per_s"]) if ref else None


def ratio(results: Sequence[Record], t: Target, volume: str) -> float | None:
    """shardpipe's MB/s over the anchor's, for one target on one volume."""
    sp = find(results, t.writer, t.codec, t.blocks, volume)
    ref = anchor_rate(results, t.anchor, t.codec, t.blocks, volume)
    return sp["mb_per_s"] / ref if sp and ref else None


def volumes_of(results: Sequence[Record]) -> list[str]:
    """The volumes of the records, in order of appearance."""
    return list(dict.fromkeys(r["volume"] for r in results))


def ratio_rows(results: Sequence[Record]) -> list[Record]:
    """Per volume, shardpipe writer, codec and block case: MB/s over each like-for-like anchor.

    An anchor for the other shardpipe writer (durable against no-fsync) is None.
    """
    rows = []
    for volume in volumes_of(results):
        for writer, codec, blocks in itertools.product(SHARDPIPE_WRITERS, CODECS, BLOCK_CASES):
            if not find(results, writer, codec, blocks, volume):
                continue
            row: Record = {"volume": volume, "writer": writer, "codec": codec, "blocks": blocks}
            for anchor, (_, _, for_writer) in ANCHORS.items():
                t = Target(writer, codec, blocks, anchor, 0.0)
                row[anchor] = ratio(results, t, volume) if writer == for_writer else None
            rows.append(row)
    return rows


def verdicts(results: Sequence[Record]) -> list[Record]:
    """Every target of issues #11 and #30 on every volume: ratio, threshold, PASS / FAIL.

    ``n/a`` if unmeasured; each row names its ``issue``.
    """
    rows = []
    issues = [(11, t) for t in TARGETS] + [(30, t) for t in TARGETS_30]
    for volume, (issue, t) in itertools.product(volumes_of(results), issues):
        value = ratio(results, t, volume)
        verdict = "n/a" if value is None else "PASS" if value >= t.threshold else "FAIL"
        row = t._asdict() | {"volume": volume, "ratio": value, "verdict": verdict}
        rows.append(row | {"issue": issue})
    return rows


def verdict_line(v: Record) -> str:
    """One verdict as a line of the report."""
    fsync = "durable" if v["writer"] == "shardpipe" else "no fsync"
    what = f"{fsync}, {v['blocks']}, {v['codec']}: {v['writer']} / {ANCHOR_NAMES[v['anchor']]}"
    value = "-" if v["ratio"] is None else f"{v['ratio']:.2f}"
    return f"  {what:<68} {value:>5}  >= {v['threshold']:<4}  {v['verdict']}"
