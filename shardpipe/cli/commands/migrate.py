"""``shardpipe migrate``: draft sharded arrays (storage transformer) to Zarr v3."""

from __future__ import annotations

import argparse

from shardpipe.cli import options as shared
from shardpipe.cli.failures import reported_as_task_failures
from shardpipe.cli.subcommand import Subcommands, add_subcommand
from shardpipe.core.checks import check_int

NAME = "migrate"
SUMMARY = "turn arrays of the sharding storage-transformer draft into Zarr v3 arrays"
DETAILS = (
    "Translate every array and group of the draft hierarchy SOURCE (written by zarr-python "
    "2.x with its experimental v3 sharding) to Zarr v3 with the sharding_indexed codec, "
    "copying every shard byte for byte; in place unless TARGET is given. Run it again after "
    "an interruption: it finishes the job."
)


def add_command(commands: Subcommands) -> None:
    """Add ``migrate`` to the commands of ``shardpipe``."""
    command = add_subcommand(commands, NAME, SUMMARY, DETAILS, run, reported_as_task_failures)
    command.add_argument("source", help="local path or fsspec URL of the draft hierarchy")
    command.add_argument("target", nargs="?", default=None, help="where to write (in place)")
    command.add_argument(
        "--add-crc32c", action="store_true", help="append a CRC32C to every shard index"
    )
    command.add_argument(
        "--zlib-as-gzip",
        action="store_true",
        help="re-wrap zlib chunks as gzip (DEFLATE data kept) so tensorstore reads them too",
    )
    shared.DRY_RUN.add(command, "report, write nothing")
    shared.COPY_CONCURRENCY.add(command)
    shared.DEPRECATED_COPY_WORKERS.add(command)
    shared.add_progress(command)
    shared.STORAGE_OPTION.add(command)
    shared.TARGET_STORAGE_OPTION.add(command)


def run(args: argparse.Namespace) -> int:
    """Run ``migrate``: print the report; return the exit status."""
    from shardpipe.legacy.migration import migrate

    options = shared.storage_options(args.storage_option)
    target_options = shared.storage_options(args.target_storage_option, "--target-storage-option")

    check_int("--copy-concurrency", args.copy_concurrency, example=8)
    report = migrate(
        args.source,
        args.target,
        add_crc32c=args.add_crc32c,
        zlib_as_gzip=args.zlib_as_gzip,
        storage_options=options,
        target_storage_options=target_options,
        dry_run=args.dry_run,
        workers=args.copy_concurrency,
        progress=args.progress,
    )
    print(report)
    return 0
