"""``shardpipe repair``: roll back what an interrupted update left, clean up, verify."""

from __future__ import annotations

import argparse

from shardpipe.cli import options as shared
from shardpipe.cli.exit_statuses import PROBLEMS
from shardpipe.cli.failures import reported_at_store
from shardpipe.cli.subcommand import Subcommands, add_subcommand

NAME = "repair"
SUMMARY = "roll back shards an interrupted update left, remove leftovers, verify"
DETAILS = (
    "Restores every shard left mid-update to its state before that update, removes staging "
    "data and a dead job's marker, then verifies. Exits 1 when the array does not verify "
    "clean afterwards."
)


def add_command(commands: Subcommands) -> None:
    """Add ``repair`` to the commands of ``shardpipe``."""
    command = add_subcommand(commands, NAME, SUMMARY, DETAILS, run, reported_at_store)
    shared.add_store(command, "store")
    shared.FORCE.add(command)
    shared.add_progress(command)


def run(args: argparse.Namespace) -> int:
    """Run ``repair``: print the report; return the exit status (1: not clean afterwards)."""
    from shardpipe.maintenance.repairs import repair

    options = shared.storage_options(args.storage_option)
    fixed = repair(
        args.store, args.path, force=args.force, storage_options=options, progress=args.progress
    )
    print(fixed)
    return 0 if fixed.ok else PROBLEMS
