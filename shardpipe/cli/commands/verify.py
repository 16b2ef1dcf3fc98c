"""``shardpipe verify``: check every shard present in a sharded array; exit 1 on a problem."""

from __future__ import annotations

import argparse

from shardpipe.cli import options as shared
from shardpipe.cli.exit_statuses import PROBLEMS
from shardpipe.cli.failures import Failures, reported_at_store, step
from shardpipe.cli.icechunk_sessions import store_to_read
from shardpipe.cli.subcommand import Subcommands, add_subcommand

NAME = "verify"
SUMMARY = "check every shard present in a sharded Zarr v3 array"
DETAILS = (
    "Check index CRC32C, ranges, overlaps and that every inner chunk decodes (and its CRC32C, "
    "where the chunks have one), in every shard present (found by listing; absent shards are "
    "counted) and that every key among the shards names a shard of the grid. Interrupted "
    "jobs are listed, each with the command that carries it on; they and other traces of an "
    "unfinished write are noted, and with --complete they are problems. Exits 1 when a "
    "problem is found."
)


def add_command(commands: Subcommands) -> None:
    """Add ``verify`` to the commands of ``shardpipe``."""
    command = add_subcommand(commands, NAME, SUMMARY, DETAILS, run, reported_at_store)
    shared.add_store(command, "store")
    shared.add_icechunk_reading(command)
    command.add_argument(
        "--complete",
        action="store_true",
        help="also fail when a write is unfinished: its job record says so, staging data or "
        "a job marker is left",
    )
    shared.add_progress(command)


def run(args: argparse.Namespace) -> int:
    """Run ``verify``: print the report; return the exit status (1: a problem found)."""
    from shardpipe.maintenance.verification import verify

    store, options = store_to_read(args, shared.storage_options(args.storage_option))
    where = f"cannot check a sharded array at {shared.store_and_path(args)}"
    with step(Failures(where=where)):
        report = verify(
            store,
            args.path,
            storage_options=options,
            complete=args.complete,
            progress=args.progress,
        )
    print(report)
    return 0 if report.ok else PROBLEMS
