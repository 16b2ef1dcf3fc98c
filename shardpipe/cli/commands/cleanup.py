"""``shardpipe cleanup``: remove what failed writes left (staging data, unfinished uploads)."""

from __future__ import annotations

import argparse

from shardpipe.cli import options as shared
from shardpipe.cli.failures import reported_at_store
from shardpipe.cli.subcommand import Subcommands, add_subcommand

NAME = "cleanup"
SUMMARY = "remove staging files and abort uploads left by failed writes"
DETAILS = (
    "Prints how many leftovers it removed. Never run it while a write to the array is under way."
)


def add_command(commands: Subcommands) -> None:
    """Add ``cleanup`` to the commands of ``shardpipe``."""
    command = add_subcommand(commands, NAME, SUMMARY, DETAILS, run, reported_at_store)
    shared.add_store(command, "store")


def run(args: argparse.Namespace) -> int:
    """Run ``cleanup``: print how many leftovers went; return the exit status."""
    from shardpipe.write.api import cleanup

    options = shared.storage_options(args.storage_option)
    removed = cleanup(args.store, args.path, storage_options=options)
    print(f"removed {removed} leftover(s)")
    return 0
