"""An OME-Zarr 0.4 image converted from S3 to S3 through a shaping proxy (issue 40, item 2).

``python -m benchmarks.ome_convert_s3 [--settings 30:25] [--reads 1,16] [--reps 3]
[--json FILE]``

A moto S3 server runs in this process and holds a two-level OME-Zarr 0.4 image
written by ome-zarr-py (``(2, 32, 512, 512)`` uint16, 32 MiB at level 0, zstd-1
chunks of ``(1, 8, 64, 64)``: 640 chunks in all). For each setting ``RTT_MS:MB_PER_S``
a :class:`~benchmarks.shaping_proxy.ShapingProxy` adds the round trip per request and
caps each connection; :func:`shardpipe.convert_ome_zarr` converts the image through
it into ``(1, 16, 256, 256)`` shards (32 chunks carried per shard, no decoding), once
per value of ``--reads``: the chunks a carrying task reads at once
(:data:`shardpipe.ome.carry_tasks.READS_AT_ONCE`; 1 reads them one after another).
Threads scheduler, best of ``--reps``; the proxy counts each rep's requests, and every
level of the target is read back through the direct endpoint and compared with the
source.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import numpy as np

from benchmarks.object_store import parse_settings, s3_server

BUCKET = "shardpipe-objstore"
SHAPE = (2, 32, 512, 512)
CHUNKS = (1, 8, 64, 64)
SHARDS = (1, 16, 256, 256)


def write_source(url: str, options: dict[str, Any]) -> list[np.ndarray]:
    """Write the OME-Zarr 0.4 source at ``url``; return its levels."""
    import numcodecs  # type: ignore[import-untyped]
    import zarr
    from ome_zarr.format import FormatV04  # type: ignore[import-untyped]
    from ome_zarr.writer import write_image  # type: ignore[import-untyped]

    image = np.random.default_rng(1).integers(0, 4000, SHAPE, dtype=np.uint16)
    group = zarr.open_group(url, mode="w", zarr_format=2, storage_options=options)
    chunking = {"chunks": CHUNKS, "compressor": numcodecs.Zstd(level=1)}
    write_image(
        image, group, axes="czyx", fmt=FormatV04(), storage_options=chunking, scale_factors=(2,)
    )
    paths = [d["path"] for d in group.attrs["multiscales"][0]["datasets"]]
    return [np.asarray(group[p][...]) for p in paths]


def convert_once(
    source: str, target: str, options: dict[str, Any], reads: int, address: Any
) -> tuple[float, dict[str, Any]]:
    """One conversion with ``reads`` chunk reads at once per task: (seconds, requests)."""
    import dask

    from benchmarks.shaping_proxy import control
    from shardpipe.ome import carry_tasks
    from shardpipe.ome.convert import convert_ome_zarr

    control(address, "reset")
    carry_tasks.READS_AT_ONCE, was = reads, carry_tasks.READS_AT_ONCE
    try:
        with dask.config.set(scheduler="threads"):
            start = time.perf_counter()
            convert_ome_zarr(
                source, target, shards=SHARDS, source_storage_options=options,
                storage_options=options,
            )  # fmt: skip
            seconds = time.perf_counter() - start
    finally:
        carry_tasks.READS_AT_ONCE = was
    return seconds, control(address, "counts")


def check_target(target: str, options: dict[str, Any], levels: list[np.ndarray]) -> None:
    """Every level of the converted image equals the source's."""
    import zarr

    group = zarr.open_group(target, mode="r", storage_options=options)
    datasets = group.attrs["ome"]["multiscales"][0]["datasets"]
    for dataset, expected in zip(datasets, levels, strict=True):
        if not np.array_equal(np.asarray(group[dataset["path"]][...]), expected):
            raise AssertionError(f"{target}/{dataset['path']} differs from its source")


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every setting and number of reads at once, best of ``args.reps``; the records."""
    from benchmarks.shaping_proxy import ShapingProxy
    from shardpipe.testing.s3 import storage_options_for

    records = []
    with s3_server() as (_, url):
        direct = storage_options_for(url)
        source = f"s3://{BUCKET}/v04.zarr"
        levels = write_source(source, direct)
        for setting, rtt, rate in args.settings:
            with ShapingProxy(url, rtt, rate) as proxy:
                options = storage_options_for(proxy.url)
                for reads in args.reads:
                    runs = []
                    for rep in range(args.reps):
                        target = f"s3://{BUCKET}/v05-{setting}-{reads}-{rep}.ome.zarr"
                        seconds, counts = convert_once(
                            source, target, options, reads, proxy.control_address
                        )
                        check_target(target, direct, levels)
                        runs.append((seconds, counts))
                    seconds, counts = min(runs, key=lambda r: r[0])
                    record = {
                        "setting": setting,
                        "reads_at_once": reads,
                        "seconds": seconds,
                        "all_seconds": [r[0] for r in runs],
                        "requests": counts,
                        "source_mib": sum(a.nbytes for a in levels) / 2**20,
                    }
                    records.append(record)
                    print(
                        f"[{setting}] reads at once {reads}: {seconds:.2f} s "
                        f"(runs {', '.join(f'{r[0]:.2f}' for r in runs)}), "
                        f"{counts.get('requests')} requests",
                        file=sys.stderr,
                        flush=True,
                    )
    return records


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, run, print a table (and write ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--settings", type=parse_settings, default=parse_settings("30:25"))
    parser.add_argument("--reads", type=lambda t: [int(n) for n in t.split(",")], default=[1, 16])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    records = run(args)
    print("| setting | reads at once per task | s (best) | runs | requests | GET | HEAD | PUT |")
    print("| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: |")
    for r in records:
        runs = ", ".join(f"{s:.2f}" for s in r["all_seconds"])
        methods = r["requests"].get("methods", {})
        print(
            f"| {r['setting']} | {r['reads_at_once']} | {r['seconds']:.2f} | {runs} | "
            f"{r['requests'].get('requests')} | {methods.get('GET', 0)} | "
            f"{methods.get('HEAD', 0)} | {methods.get('PUT', 0)} |"
        )
    if args.json:
        with open(args.json, "w") as out:
            json.dump(records, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
