"""The ``shardpipe`` parser, built from the command modules, and ``main``, which runs one.

Each command lives in its own module of :mod:`shardpipe.cli.commands`
(listed in :data:`COMMANDS`, in the order ``shardpipe --help`` lists
them); the options several commands take are defined once in
:mod:`shardpipe.cli.options`, and the exit statuses in
:mod:`shardpipe.cli.exit_statuses`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from shardpipe._version import __version__
from shardpipe.advice import command_line_terms
from shardpipe.cli.closed_pipe import output_may_be_cut_short
from shardpipe.cli.commands import (
    cleanup,
    compact,
    convert_ome_zarr,
    info,
    migrate,
    plan,
    rechunk,
    repair,
    repair_dataset,
    verify,
    write_dataset,
    write_ome_zarr,
    write_precomputed,
)
from shardpipe.cli.exit_statuses import statuses_text
from shardpipe.cli.failures import run_command
from shardpipe.cli.options import show_progress
from shardpipe.cli.subcommand import Command, HelpFormatter
from shardpipe.engine.heap import SHARED_ARENAS, share_arenas

COMMANDS: tuple[Command, ...] = (
    plan,
    verify,
    cleanup,
    info,
    repair,
    compact,
    rechunk,
    write_precomputed,
    write_ome_zarr,
    convert_ome_zarr,
    migrate,
    write_dataset,
    repair_dataset,
)
"""The command modules, each with ``add_command(commands)`` and ``run(args) -> int``."""

DESCRIPTION = (
    "Write, rechunk, check and maintain sharded Zarr v3 arrays; write and repair datasets; "
    "write OME-Zarr 0.5 images and Neuroglancer precomputed volumes; migrate arrays of the "
    "sharding draft.\n\n"
    "shardpipe COMMAND --help describes a command. Every command ends with one of the exit "
    "statuses listed at the end of this help."
)


def _parser() -> argparse.ArgumentParser:
    """The parser of ``shardpipe`` and of every command."""
    parser = argparse.ArgumentParser(
        prog="shardpipe",
        description=DESCRIPTION,
        epilog=statuses_text(),
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"shardpipe {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_command(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status.

    A command's error ends it in one message and its exit status
    (:func:`~shardpipe.cli.failures.run_command`). Standard output closed early by
    its reader (``| head -1``) is no error: the command ends with its own status
    (:mod:`shardpipe.cli.closed_pipe`).
    """
    with output_may_be_cut_short(), command_line_terms():
        args = _parser().parse_args(argv)
        show_progress(args)
        return run_command(args)


def run() -> int:
    """The ``shardpipe`` console script and ``python -m shardpipe``: :func:`main`, in a
    process of the command's own.

    Before the command starts a thread, the threads it will start are made to share
    two of glibc's heaps (:func:`~shardpipe.engine.heap.share_arenas`: a rechunk of
    slabs under ``--max-mem 64MB`` peaked at +75-93 MiB where it took +203); set
    ``MALLOC_ARENA_MAX`` to choose otherwise. The processes it starts (a cluster's
    workers) inherit the limit through ``MALLOC_ARENA_MAX``.
    """
    if share_arenas():  # and in the processes it starts (a cluster's workers)
        os.environ.setdefault("MALLOC_ARENA_MAX", str(SHARED_ARENAS))
    return main()


if __name__ == "__main__":
    sys.exit(run())
