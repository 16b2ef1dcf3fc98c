"""The ``shardpipe migrate`` command: draft sharded arrays (storage transformer) to Zarr v3."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from shardpipe.cli.exit_statuses import EXPECTED, exit_status, fail
from shardpipe.errors import InvalidArgumentError


def add_command(
    commands: Any, add_storage_option: Callable[[argparse.ArgumentParser], None]
) -> None:
    """Add ``migrate`` to the subcommands of the parser."""
    command = commands.add_parser(
        "migrate",
        help="turn arrays of the sharding storage-transformer draft into Zarr v3 arrays",
        description="Translate every array and group of the draft hierarchy SOURCE (written by "
        "zarr-python 2.x with its experimental v3 sharding) to Zarr v3 with the "
        "sharding_indexed codec, copying every shard byte for byte; in place unless TARGET "
        "is given. Run it again after an interruption: it finishes the job.",
    )
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
    command.add_argument("--dry-run", action="store_true", help="report, write nothing")
    command.add_argument("--workers", type=int, default=8, help="shards copied at once (8)")
    command.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_storage_option(command)
    command.add_argument(
        "--target-storage-option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="fsspec option for a TARGET elsewhere (default: those of SOURCE); repeatable",
    )


def run(
    args: argparse.Namespace,
    options: dict[str, Any] | None,
    target_options: dict[str, Any] | None,
) -> int:
    """Run ``migrate``; return the exit status."""
    from shardpipe.legacy.migration import migrate

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
            progress=not args.no_progress,
        )
    except EXPECTED as err:
        if isinstance(err, InvalidArgumentError):
            return fail("migrate", err)
        print(f"shardpipe migrate: failed ({type(err).__name__}: {err})", file=sys.stderr)
        return exit_status(err, during_work=True)
    print(report)
    return 0
