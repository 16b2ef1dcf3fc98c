"""``shardpipe repair-dataset``: every array of a dataset repaired, cut back to its last state."""

from __future__ import annotations

import argparse

from shardpipe.cli import options as shared
from shardpipe.cli.exit_statuses import PROBLEMS
from shardpipe.cli.failures import Failures
from shardpipe.cli.subcommand import Subcommands, add_subcommand

NAME = "repair-dataset"
SUMMARY = "repair every array of a dataset and cut them back to its last complete state"
DETAILS = (
    "After an interrupted ds.shard.to_zarr: repairs every sharded array (see 'repair') and "
    "resizes every array to its shape in the consolidated metadata, which the writer "
    "rewrites last. Exits 1 when an array does not verify clean afterwards."
)


def add_command(commands: Subcommands) -> None:
    """Add ``repair-dataset`` to the commands of ``shardpipe``."""
    command = add_subcommand(commands, NAME, SUMMARY, DETAILS, run, _failures)
    command.add_argument("store", help="local path or fsspec URL of the dataset")
    shared.GROUP.add(command)
    shared.FORCE.add(command)
    shared.add_progress(command)
    shared.STORAGE_OPTION.add(command)


def run(args: argparse.Namespace) -> int:
    """Run ``repair-dataset``: print the report; return the exit status (1: not clean)."""
    from shardpipe.dataset.repair import repair_dataset

    options = shared.storage_options(args.storage_option)
    repaired = repair_dataset(
        args.store,
        group=args.group,
        storage_options=options,
        force=args.force,
        progress=args.progress,
    )
    print(repaired)
    return 0 if repaired.ok else PROBLEMS


def _failures(args: argparse.Namespace) -> Failures:
    """Errors name the dataset's store."""
    return Failures(where=args.store)
