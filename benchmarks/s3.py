"""shardpipe against dask ``to_zarr`` on S3: ``python -m benchmarks.s3 [--small]``.

Starts a moto S3 server on 127.0.0.1 in this process (fake credentials in the
environment), creates a bucket, then runs every case in a fresh subprocess
(``benchmarks.s3_run``) on the same volume: shardpipe and dask ``to_zarr``
(into a zarr-python sharded array on the same server) with blocks aligned to
the shards, misaligned blocks, and blocks under a ``max_mem`` small enough
that shardpipe writes every shard as a multipart upload. The report gives
MB/s and the ratio shardpipe / dask per block case.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.child import run_child
from benchmarks.data import SHARDS, Layout
from benchmarks.large_shard import num_cell
from benchmarks.report import BUSY_WARN, _fmt, _table
from benchmarks.s3_run import CREDENTIALS, REGION
from benchmarks.suite import run_meta

S3_SHAPE = (256, 512, 512)
"""Full size: 128 MiB of uint16, eight shards."""
SMALL_SHAPE = (128, 256, 512)
"""``--small``: 32 MiB of uint16, two shards."""
BUCKET = "shardpipe-bench"
MULTIPART_BLOCKS = (64, 256, 256)
MULTIPART_MAX_MEM = "32MB"
"""Budget per task of the multipart case: a 16 MiB shard > 32 MB / 3, so 2 parts of 8 MiB."""
WRITERS = ("shardpipe", "dask")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line (see ``--help``)."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.s3", description=__doc__)
    size = p.add_mutually_exclusive_group()
    size.add_argument("--small", action="store_true", help=f"volume {SMALL_SHAPE} (smoke test)")
    size.add_argument(
        "--shape", type=int, nargs=3, metavar=("Z", "Y", "X"), help=f"default {S3_SHAPE}"
    )
    p.add_argument("--reps", type=int, default=2, help="repetitions per case, best is kept")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, help="also write all records to this JSON file")
    p.add_argument("--timeout", type=float, default=3600, help="seconds per case")
    args = p.parse_args(argv)
    args.shape = tuple(args.shape or (SMALL_SHAPE if args.small else S3_SHAPE))
    return args


def block_cases(shape: tuple[int, ...]) -> list[tuple[str, tuple[int, ...], str | None]]:
    """Return ``(name, Dask blocks, shardpipe max_mem)`` of every block case."""
    clip = lambda blocks: tuple(min(b, n) for b, n in zip(blocks, shape, strict=True))  # noqa: E731
    return [
        ("aligned", clip(SHARDS), None),
        ("misaligned", clip((100, 100, 100)), None),
        ("multipart", clip(MULTIPART_BLOCKS), MULTIPART_MAX_MEM),
    ]


def _free_port() -> int:
    """Return a TCP port of 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def moto_server() -> Iterator[tuple[Any, str]]:
    """Run a moto S3 server in this process; yield a boto3 client and the endpoint URL.

    The bucket ``BUCKET`` is created on it.

    Fake credentials and the region are put in ``os.environ`` first, so that
    the subprocesses inherit them; profile and endpoint variables are removed.
    """
    import boto3
    from moto.server import ThreadedMotoServer

    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        os.environ.pop(name, None)
    os.environ |= {
        "AWS_ACCESS_KEY_ID": CREDENTIALS["key"],
        "AWS_SESSION_TOKEN": "testing",
        "AWS_SECRET_ACCESS_KEY": CREDENTIALS["secret"],
        "AWS_SECURITY_TOKEN": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_REGION": REGION,
    }
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        endpoint = f"http://127.0.0.1:{port}"
        client = boto3.client("s3", endpoint_url=endpoint, region_name=REGION)
        client.create_bucket(Bucket=BUCKET)
        yield client, endpoint
    finally:
        server.stop()


def empty_bucket(client: Any) -> int:
    """Delete every object and abort every unfinished upload; return how many uploads were left."""
    uploads = client.list_multipart_uploads(Bucket=BUCKET).get("Uploads", [])
    for up in uploads:
        client.abort_multipart_upload(Bucket=BUCKET, Key=up["Key"], UploadId=up["UploadId"])
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
        keys = [{"Key": obj["Key"]} for obj in page.get("Contents", [])]
        if keys:
            client.delete_objects(Bucket=BUCKET, Delete={"Objects": keys})
    return len(uploads)


NUMERIC = (
    ("mb_per_s", ".1f"),
    ("best_s", ".2f"),
    ("best_cpu_s", ".2f"),
    ("server_cpu_s", ".2f"),
    ("busy_pct", ".0f"),
    ("peak_rss_mib", ".0f"),
    ("peak_delta_mib", ".0f"),
    ("output_mib", ".1f"),
)
"""Numeric columns of the table: record key and format."""


def table(results: list[dict[str, Any]]) -> str:
    """Render one row per case."""
    header = (
        "blocks",
        "writer",
        "Dask blocks",
        "max_mem",
        "MB/s",
        "best s",
        "cpu s",
        "server cpu s",
        "busy%",
        "peak MiB",
        "+peak MiB",
        "stored MiB",
        "status",
    )
    cells = [num_cell(key, spec) for key, spec in NUMERIC]
    rows = [
        (
            r["case"],
            r["writer"],
            "x".join(map(str, r["blocks"])),
            r.get("max_mem") or ("default" if r["writer"] == "shardpipe" else "-"),
            *(cell(r) for cell in cells),
            r.get("status", "error"),
        )
        for r in results
    ]
    return _table(header, rows, left=(0, 1, 2, 3, len(header) - 1))


LEGEND = """
MB/s = 1e6 raw bytes per second of the best rep; cpu s = CPU of the writer's process in that rep;
server cpu s = CPU of the moto server in that rep; busy% = share of all cores that other processes
(not the server) used then; stored MiB = bytes in the bucket after the write.
"""


def ratios(results: list[dict[str, Any]]) -> dict[str, float | None]:
    """Return shardpipe MB/s / dask MB/s per block case (None where either failed)."""
    ok = {(r["case"], r["writer"]): r for r in results if r.get("status") == "ok"}
    out: dict[str, float | None] = {}
    for case in dict.fromkeys(r["case"] for r in results):
        sp, dk = ok.get((case, "shardpipe")), ok.get((case, "dask"))
        out[case] = sp["mb_per_s"] / dk["mb_per_s"] if sp and dk else None
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the cases against a local moto server, print the report and return the exit status."""
    args = parse_args(argv)
    results = []
    with moto_server() as (client, endpoint):
        for case, blocks, max_mem in block_cases(args.shape):
            for writer in WRITERS:
                print(f"{writer} {case} ...", end=" ", file=sys.stderr, flush=True)
                start = time.perf_counter()
                options = {
                    "--writer": writer,
                    "--case": case,
                    "--blocks": blocks,
                    "--shape": args.shape,
                    "--seed": args.seed,
                    "--reps": args.reps,
                    "--endpoint": endpoint,
                    "--bucket": BUCKET,
                    "--max-mem": max_mem if writer == "shardpipe" else None,
                }
                record = run_child("benchmarks.s3_run", options, args.timeout)
                record |= {"case": case, "writer": writer, "blocks": list(blocks)}
                if record.get("status") == "ok":
                    record["output_mib"] = record["output_bytes"] / 2**20
                    record["busy_pct"] = 100 * (record.get("best_others_cpu_share") or 0)
                leftover = empty_bucket(client)
                if leftover:
                    record["notes"] = [*record.get("notes", []), f"{leftover} unfinished uploads"]
                results.append(record)
                rate = f"{record['mb_per_s']:.1f} MB/s " if record.get("status") == "ok" else ""
                elapsed = time.perf_counter() - start
                print(f"{record.get('status')} {rate}({elapsed:.1f} s)", file=sys.stderr)
    layout = Layout(args.shape)
    meta = run_meta(argparse.Namespace(**vars(args), out_dir=f"s3://{BUCKET}"), layout)
    print(
        f"volume {args.shape} uint16 = {layout.nbytes / 1e6:.1f} MB raw, shards {SHARDS}, inner "
        f"chunks {layout.chunks}, zstd level 1, moto S3 server in the parent process, threaded "
        f"scheduler, {meta['cpu_count']} cores, best of {args.reps}\n"
    )
    print(table(results))
    print(LEGEND)
    lines = [f"  {case:<11} {_fmt(ratio, '.2f')}" for case, ratio in ratios(results).items()]
    print("shardpipe MB/s / dask to_zarr MB/s (>1: shardpipe faster):\n" + "\n".join(lines))
    notes = [f"  {r['writer']} {r['case']}: {n}" for r in results for n in r.get("notes", [])]
    notes += [
        f"  {r['writer']} {r['case']}: {r['message']}" for r in results if r.get("status") != "ok"
    ]
    print("\nNotes:\n" + ("\n".join(notes) or "  (none)"))
    busy = max((r.get("busy_pct", 0) for r in results), default=0)
    if busy > 100 * BUSY_WARN:
        print(
            f"\nWARNING: other processes used up to {busy:.0f}% of the cores during a timed "
            "write; MB/s are unreliable, compare cpu s."
        )
    prints = {r["fingerprint"] for r in results if r.get("status") == "ok"}
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "results": results}, indent=1, default=str))
    failed = [r for r in results if r.get("status") != "ok"]
    if len(prints) > 1:
        print(f"FAILED: cases saw different data: {sorted(prints)}", file=sys.stderr)
    return 1 if failed or len(prints) > 1 else 0


if __name__ == "__main__":
    sys.exit(main())
