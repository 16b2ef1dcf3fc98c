"""``shardpipe convert-ome-zarr``: an OME-Zarr 0.4 image (Zarr v2) as sharded OME-Zarr 0.5."""

from __future__ import annotations

import argparse

from shardpipe.cli import options as shared
from shardpipe.cli.compute import compute_on
from shardpipe.cli.failures import reported_as_task_failures
from shardpipe.cli.subcommand import Subcommands, add_subcommand
from shardpipe.core.checks import check_int

NAME = "convert-ome-zarr"
SUMMARY = "convert an OME-Zarr 0.4 image (Zarr v2) into a sharded OME-Zarr 0.5 image"
DETAILS = (
    "Every level array of SOURCE and of its label images becomes a sharded Zarr v3 array at "
    "TARGET; where the codec carries over (no filters, C order, blosc, zstd, gzip, zlib or "
    "none) the v2 chunks become the inner chunks byte for byte, one task per shard; otherwise "
    "the level is decoded and written again."
)


def add_command(commands: Subcommands) -> None:
    """Add ``convert-ome-zarr`` to the commands of ``shardpipe``."""
    command = add_subcommand(commands, NAME, SUMMARY, DETAILS, run, reported_as_task_failures)
    command.add_argument("source", help="local path or fsspec URL of the OME-Zarr 0.4 image")
    command.add_argument("target", help="where the OME-Zarr 0.5 image goes")
    shared.SHARD_SHAPE.add(command, "shard shape per axis (of level 0; clipped for the others)")
    command.add_argument(
        "--reencode", action="store_true", help="decode and encode every chunk again"
    )
    shared.NO_CHUNK_CHECKSUMS.add(command)
    shared.MAX_MEM.add(command)
    shared.OVERWRITE.add(command, "replace what is at TARGET")
    shared.DRY_RUN.add(command)
    shared.add_progress(command)
    shared.add_compute(command)
    shared.STORAGE_OPTION.add(command)
    shared.SOURCE_STORAGE_OPTION.add(command)


def run(args: argparse.Namespace) -> int:
    """Run ``convert-ome-zarr``: print the plan, then the report; return the exit status."""
    from shardpipe.ome.convert import prepare_ome_conversion

    options = shared.storage_options(args.storage_option)
    source_options = shared.storage_options(args.source_storage_option, "--source-storage-option")
    if args.workers is not None:
        check_int("--workers", args.workers, example=4)
    job = prepare_ome_conversion(
        args.source,
        args.target,
        shards=args.shards,
        overwrite=args.overwrite,
        source_storage_options=source_options,
        storage_options=options,
        max_mem=args.max_mem,
        chunk_checksums=not args.no_chunk_checksums,
        reencode=args.reencode,
    )
    print(job)
    if args.dry_run:
        return 0
    with compute_on(args.scheduler, args.workers):
        report = job.execute(progress=args.progress)
    print(report)
    return 0
