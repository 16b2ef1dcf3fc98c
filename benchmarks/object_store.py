"""Writers into S3 through a latency- and bandwidth-shaping proxy (issue 40, item 6).

``python -m benchmarks.object_store [--small] [--settings 30:25,20:80] [--no-proxy]
[--writers shardpipe,tensorstore,zarr,dask,bound] [--cluster] [--reps N] [--json FILE]``

A moto S3 server runs in this process; for each setting ``RTT_MS:MB_PER_S``
a :class:`~benchmarks.shaping_proxy.ShapingProxy` (its own process) sits in
front of it, adding the round trip per request and capping each connection
at the rate in each direction (``direct``, or ``--no-proxy``: no proxy).
Each writer writes the same ``noisy`` ``uint16`` volume (zstd-1 keeps about
65 % of it) as a sharded Zarr v3 array, each case in a fresh child
(:mod:`benchmarks.object_store_child`), best of ``--reps``; the proxy counts
each rep's requests. ``bound`` is two cases: ``put`` (the encoded shards PUT
by 32 connections at once, per setting) and ``local`` (shardpipe into a
local folder without fsync, once: the CPU side); the bound of a setting is
the slower of the two. Every output is read back through the direct
endpoint and compared with the volume.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import platform
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.cases import Case

BUCKET = "shardpipe-objstore"
SHAPES = {False: (256, 1024, 512), True: (128, 512, 256)}  # 256 MiB, 32 shards; 32 MiB, 4
SHARDS = (64, 256, 256)  # 8 MiB of uint16
CHUNKS = (64, 64, 64)
WRITERS = ("shardpipe", "tensorstore", "zarr", "dask", "bound")
LABELS = {
    "shardpipe": "shardpipe",
    "cluster": "shardpipe, LocalCluster 2x1",
    "tensorstore": "tensorstore",
    "zarr": "zarr-python z[...] =",
    "dask": "dask to_zarr",
    "put": "bound: 32 PUTs at once",
    "local": "bound: shardpipe on local disk",
}
OUT = Path(__file__).resolve().parent / "out"


def parse_settings(text: str) -> list[tuple[str, float, float | None]]:
    """``"30:25,direct"`` -> ``[("30 ms / 25 MB/s", 0.030, 25e6), ("direct", 0, None)]``.

    ``RTT_MS:MB_PER_S`` per setting (MB = 10**6 bytes; a rate of 0: no cap).
    """
    settings: list[tuple[str, float, float | None]] = []
    for item in filter(None, text.split(",")):
        if item == "direct":
            settings.append(("direct", 0.0, None))
            continue
        rtt, _, rate = item.partition(":")
        mb = float(rate or 0)
        name = f"{float(rtt):g} ms / {f'{mb:g} MB/s' if mb else 'no cap'}"
        settings.append((name, float(rtt) / 1e3, mb * 1e6 or None))
    return settings


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line (see ``--help``)."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.object_store", description=__doc__)
    p.add_argument("--small", action="store_true", help=f"volume {SHAPES[True]} (smoke test)")
    p.add_argument("--settings", default="30:25,20:80", help="RTT_MS:MB_PER_S,... or direct")
    p.add_argument("--no-proxy", action="store_true", help="also write directly to moto, first")
    p.add_argument("--writers", default=",".join(WRITERS), help="subset of %(default)s")
    p.add_argument("--cluster", action="store_true", help="also shardpipe on a 2x1 LocalCluster")
    p.add_argument("--reps", type=int, default=2, help="repetitions per case, fastest kept (2)")
    p.add_argument("--seed", type=int, default=0, help="seed of the volume's noise")
    p.add_argument("--json", type=Path, help="also write every record to this JSON file")
    p.add_argument("--timeout", type=float, default=1800, help="seconds allowed per case")
    args = p.parse_args(argv)
    args.writers = [w for w in args.writers.split(",") if w]
    if unknown := sorted(set(args.writers) - set(WRITERS)):
        p.error(f"--writers: unknown {unknown}; choose from {list(WRITERS)}")
    args.settings = parse_settings(("direct," if args.no_proxy else "") + args.settings)
    args.shape = SHAPES[args.small]
    return args


def base_case(args: argparse.Namespace, writer: str, target: str, **options: Any) -> Case:
    """A case of this benchmark (the ``noisy`` volume, Dask blocks = shards where taken)."""
    return Case(
        "object_store",
        LABELS[writer],
        "shardpipe" if writer == "cluster" else writer,
        "noisy",
        args.shape,
        target,
        shards=SHARDS,
        chunks=CHUNKS,
        reps=args.reps,
        seed=args.seed,
        **options,
    )


@contextlib.contextmanager
def s3_server() -> Iterator[tuple[Any, str]]:
    """moto's S3 server in this process with the bucket; yield a boto3 client and the URL."""
    import boto3

    from shardpipe.testing import s3

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    with s3.moto_server() as url:
        s3.make_bucket(url, BUCKET)
        yield boto3.client("s3", endpoint_url=url, region_name=s3.REGION), url


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Run every case (a child each), setting by setting; return the records."""
    from benchmarks import object_store_child
    from benchmarks.shaping_proxy import ShapingProxy
    from shardpipe.testing.s3 import storage_options_for

    records: list[dict[str, Any]] = []

    def one(case: Case, setting: str, address: Any, direct: Any) -> None:
        print(f"[{setting}] {case.label} ...", end=" ", file=sys.stderr, flush=True)
        start = time.perf_counter()
        record = object_store_child.run(case, address, direct, args.timeout)
        record["setting"] = setting
        records.append(record)
        rate = f"{record['mb_per_s']:.1f} MB/s " if record.get("mb_per_s") else ""
        took = time.perf_counter() - start
        print(f"{record['status']} {rate}({took:.0f} s)", file=sys.stderr, flush=True)

    with s3_server() as (client, url):
        direct = storage_options_for(url)
        if "bound" in args.writers:
            one(base_case(args, "local", str(OUT / "object-store-local")), "cpu", None, None)
        for setting, rtt, rate in args.settings:
            proxy = ShapingProxy(url, rtt, rate) if setting != "direct" else None
            with proxy or contextlib.nullcontext():
                options = storage_options_for(proxy.url if proxy else url)
                address = proxy.control_address if proxy else None
                names = [w for w in WRITERS if w in args.writers]
                names = [("put" if w == "bound" else w) for w in names]
                if args.cluster:
                    at = names.index("shardpipe") + 1 if "shardpipe" in names else 0
                    names.insert(at, "cluster")
                for name in names:
                    target = f"s3://{BUCKET}/{name}.zarr"
                    workers = 2 if name == "cluster" else 0
                    case = base_case(args, name, target, storage_options=options, workers=workers)
                    one(case, setting, address, direct)
                    empty_bucket(client)
    return records


def empty_bucket(client: Any) -> None:
    """Abort open uploads and delete every object of the bucket (moto keeps them in memory)."""
    uploads = client.list_multipart_uploads(Bucket=BUCKET).get("Uploads", [])
    for up in uploads:
        client.abort_multipart_upload(Bucket=BUCKET, Key=up["Key"], UploadId=up["UploadId"])
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
        if keys := [{"Key": obj["Key"]} for obj in page.get("Contents", [])]:
            client.delete_objects(Bucket=BUCKET, Delete={"Objects": keys})


def run_meta(args: argparse.Namespace) -> dict[str, Any]:
    """The run's description for ``--json``."""
    import shardpipe

    return {
        "bench": "object_store",
        "shape": list(args.shape),
        "shards": list(SHARDS),
        "chunks": list(CHUNKS),
        "volume": "noisy",
        "settings": [s[0] for s in args.settings],
        "reps": args.reps,
        "shardpipe": getattr(shardpipe, "__version__", "?"),
        "shardpipe_path": str(Path(shardpipe.__file__).parent),
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "load_before": os.getloadavg(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print its report; return 1 if any case failed."""
    from benchmarks.object_store_report import rows, table

    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    meta = run_meta(args)
    records = run(args)
    meta["load_after"] = os.getloadavg()
    print(table(records, meta))
    if args.json:
        payload = {"meta": meta, "rows": rows(records), "results": records}
        args.json.write_text(json.dumps(payload, indent=1, default=str))
    failed = [r for r in records if r["status"] != "ok"]
    for r in failed:
        print(f"FAILED: [{r.get('setting')}] {r['label']}: {r.get('message')}", file=sys.stderr)
    prints = {r["fingerprint"] for r in records if r.get("fingerprint")}
    if len(prints) > 1:
        print(f"FAILED: cases saw different data: {sorted(prints)}", file=sys.stderr)
    return 1 if failed or len(prints) > 1 else 0


if __name__ == "__main__":
    sys.exit(main())
