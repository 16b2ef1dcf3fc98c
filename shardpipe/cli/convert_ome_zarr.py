"""The ``shardpipe convert-ome-zarr`` command: an OME-Zarr 0.4 image as sharded OME-Zarr 0.5."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from shardpipe.cli.exit_statuses import EXPECTED, exit_status, fail
from shardpipe.cli.rechunk import add_compute_options
from shardpipe.errors import InvalidArgumentError


def add_command(
    commands: Any,
    ints: Callable[[str], tuple[int, ...]],
    add_storage_option: Callable[[argparse.ArgumentParser], None],
) -> None:
    """Add ``convert-ome-zarr`` to the subcommands of the parser."""
    command = commands.add_parser(
        "convert-ome-zarr",
        help="convert an OME-Zarr 0.4 image (Zarr v2) into a sharded OME-Zarr 0.5 image",
        description="Every level array of SOURCE and of its label images becomes a sharded "
        "Zarr v3 array at TARGET; where the codec carries over (no filters, C order, blosc, "
        "zstd, gzip, zlib or none) the v2 chunks become the inner chunks byte for byte, one "
        "task per shard; otherwise the level is decoded and written again.",
    )
    command.add_argument("source", help="local path or fsspec URL of the OME-Zarr 0.4 image")
    command.add_argument("target", help="where the OME-Zarr 0.5 image goes")
    command.add_argument("--shards", type=ints, default=None, help="shard shape per axis")
    command.add_argument(
        "--reencode", action="store_true", help="decode and encode every chunk again"
    )
    command.add_argument(
        "--no-chunk-checksums", action="store_true", help="no crc32c after each inner chunk"
    )
    command.add_argument("--max-mem", default="1GiB", help="memory budget per task (1GiB)")
    command.add_argument("--overwrite", action="store_true", help="replace what is at TARGET")
    command.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")
    command.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_compute_options(command, add_storage_option)


def run(
    args: argparse.Namespace,
    options: dict[str, Any] | None,
    source_options: dict[str, Any] | None,
) -> int:
    """Run ``convert-ome-zarr``; return the exit status."""
    from shardpipe.cli.rechunk import scheduler
    from shardpipe.ome.convert import prepare_conversion

    try:
        job = prepare_conversion(
            args.source,
            args.target,
            shards=args.shards,
            overwrite=args.overwrite,
            source_options=source_options,
            storage_options=options,
            max_mem=args.max_mem,
            chunk_checksums=not args.no_chunk_checksums,
            reencode=args.reencode,
        )
        print(job)
        if args.dry_run:
            return 0
        with scheduler(args.scheduler, args.workers):
            report = job.execute(progress=not args.no_progress)
    except EXPECTED as err:
        if isinstance(err, InvalidArgumentError):
            return fail("convert-ome-zarr", err)
        print(f"shardpipe convert-ome-zarr: failed ({type(err).__name__}: {err})", file=sys.stderr)
        return exit_status(err, during_work=True)
    print(report)
    return 0
