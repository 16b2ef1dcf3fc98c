"""``shardpipe migrate``: draft sharded arrays (storage transformer) to Zarr v3."""

from __future__ import annotations

import argparse
import sys

from shardpipe.cli import options as shared
from shardpipe.cli.exit_statuses import EXPECTED, exit_status, fail
from shardpipe.cli.subcommand import Subcommands, add_subcommand
from shardpipe.errors import InvalidArgumentError

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
    command = add_subcommand(commands, NAME, SUMMARY, DETAILS, run)
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
    shared.COPY_WORKERS.add(command)
    shared.add_progress(command, shown=True)
    shared.STORAGE_OPTION.add(command)
    shared.TARGET_STORAGE_OPTION.add(command)


def run(args: argparse.Namespace) -> int:
    """Run ``migrate``: print the report; return the exit status."""
    from shardpipe.legacy.migration import migrate

    options = shared.storage_options(args.storage_option)
    target_options = shared.storage_options(args.target_storage_option, "--target-storage-option")

    try:
        report = migrate(
            args.source,
            args.target,
            add_crc32c=args.add_crc32c,
            zlib_as_gzip=args.zlib_as_gzip,
            storage_options=options,
            target_storage_options=target_options,
            dry_run=args.dry_run,
            workers=args.workers,
            progress=args.progress,
        )
    except EXPECTED as err:
        if isinstance(err, InvalidArgumentError):
            return fail(NAME, err)
        print(f"shardpipe {NAME}: failed ({type(err).__name__}: {err})", file=sys.stderr)
        return exit_status(err, during_work=True)
    print(report)
    return 0
