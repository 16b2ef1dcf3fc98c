"""``shardpipe compact``: rewrite shards whose unused space is above a threshold."""

from __future__ import annotations

import argparse

from shardpipe.cli import options as shared
from shardpipe.cli.failures import reported_at_store
from shardpipe.cli.subcommand import Subcommands, add_subcommand

NAME = "compact"
SUMMARY = "rewrite shards whose unused space is above a threshold"
DETAILS = "Kept inner chunks are copied as they are; each shard is replaced atomically."


def add_command(commands: Subcommands) -> None:
    """Add ``compact`` to the commands of ``shardpipe``."""
    command = add_subcommand(commands, NAME, SUMMARY, DETAILS, run, reported_at_store)
    shared.add_store(command, "store")
    command.add_argument(
        "--threshold", type=float, default=0.1, help="unused share above which to rewrite"
    )
    shared.add_progress(command)


def run(args: argparse.Namespace) -> int:
    """Run ``compact``: print the report; return the exit status."""
    from shardpipe.maintenance.compaction import compact

    options = shared.storage_options(args.storage_option)
    compacted = compact(
        args.store,
        args.path,
        threshold=args.threshold,
        storage_options=options,
        progress=args.progress,
    )
    print(compacted)
    return 0
