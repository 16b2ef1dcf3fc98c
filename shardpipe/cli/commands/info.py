"""``shardpipe info``: what a sharded array (or group, or volume) holds, from its indexes."""

from __future__ import annotations

import argparse

from shardpipe.cli import options as shared
from shardpipe.cli.failures import reported_at_store
from shardpipe.cli.icechunk_sessions import store_to_read
from shardpipe.cli.subcommand import Subcommands, add_subcommand

NAME = "info"
SUMMARY = "describe a sharded array: layout, codecs, shards, bytes used and unused"
DETAILS = (
    "Reads zarr.json and every shard's index (no inner chunk). Interrupted jobs are listed "
    "as verify lists them, each with the command that carries it on."
)


def add_command(commands: Subcommands) -> None:
    """Add ``info`` to the commands of ``shardpipe``."""
    command = add_subcommand(commands, NAME, SUMMARY, DETAILS, run, reported_at_store)
    shared.add_store(command, "store")
    shared.add_icechunk_reading(command)
    shared.add_progress(command)


def run(args: argparse.Namespace) -> int:
    """Run ``info``: print the description; return the exit status."""
    from shardpipe.maintenance.array_info import info

    store, options = store_to_read(args, shared.storage_options(args.storage_option))
    print(info(store, args.path, storage_options=options, progress=args.progress))
    return 0
