"""Options that several commands take, each defined once: its flags, meaning, default, help.

A command adds a shared option with ``OPTION.add(command)``, or a block of
them with the ``add_*`` functions below. The help may be worded for the
command (``help=``); what the option means (destination, type, default,
choices) may not change. The readers of option values (``64,64,64``,
``time=365``, ``zstd:3``, ``NAME=VALUE``) live here too, so that a value is
read the same way by every command. tests/cli checks that every flag that
several commands take is defined here, and means one thing in all of them.

Two flags still mean two things (issue 32 settles them): ``--workers`` is
the number of LocalCluster processes in ``rechunk`` and
``write-precomputed``, and shards copied at once in ``migrate``
(:data:`COPY_WORKERS`); ``--shards``/``--chunks`` are shapes for arrays and
sizes by dimension name for datasets.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from shardpipe.core.memory import DEFAULT_MAX_MEM


@dataclass(frozen=True)
class Option:
    """One command-line option, as every command that takes it takes it.

    Attributes
    ----------
    flags : tuple of str
        Its flags, e.g. ``("--max-mem",)``.
    help : str or None
        Its help, unless a command words it for itself.
    settings : mapping
        The rest of :meth:`argparse.ArgumentParser.add_argument`'s
        arguments: what the option means (``type``, ``default``,
        ``action``, ``choices``, ``dest``, ``metavar``).
    """

    flags: tuple[str, ...]
    help: str | None
    settings: Mapping[str, Any] = field(default_factory=dict)

    def add(
        self, command: argparse.ArgumentParser | argparse._ActionsContainer, help: str | None = None
    ) -> argparse.Action:
        """Add the option to ``command`` (a parser or a group of it), ``help`` worded for it."""
        return command.add_argument(*self.flags, help=help or self.help, **self.settings)


def int_tuple(text: str) -> tuple[int, ...]:
    """Read ``64,64,64`` as ``(64, 64, 64)``."""
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers such as 64,64,64, got {text!r}"
        ) from None
    return values


def dim_sizes(text: str) -> dict[str, int]:
    """Read ``time=365,lat=720`` as ``{"time": 365, "lat": 720}``."""
    sizes: dict[str, int] = {}
    for item in text.split(","):
        name, sep, value = item.partition("=")
        try:
            sizes[name.strip()] = int(value)
        except ValueError:
            sep = ""
        if not sep or not name.strip():
            raise argparse.ArgumentTypeError(
                f"expected DIM=SIZE pairs such as time=365,lat=720, got {text!r}"
            )
    return sizes


def parse_compressor(text: str) -> Any:
    """Read ``zstd[:level]``, ``gzip[:level]``, ``blosc[:cname[:level]]`` or ``none``."""
    from zarr.codecs import BloscCodec, GzipCodec, ZstdCodec  # zarr only for commands that write

    name, *args = text.lower().split(":")
    try:
        if name == "none" and not args:
            return None
        if name == "zstd" and len(args) <= 1:
            return ZstdCodec(level=int(args[0]) if args else 3)
        if name == "gzip" and len(args) <= 1:
            return GzipCodec(level=int(args[0]) if args else 5)
        if name == "blosc" and len(args) <= 2:
            cname: Any = args[0] if args else "zstd"
            return BloscCodec(cname=cname, clevel=int(args[1]) if len(args) > 1 else 5)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"--compressor {text!r}: {err}") from None
    raise argparse.ArgumentTypeError(
        f"--compressor {text!r}: use zstd[:level], gzip[:level], blosc[:cname[:clevel]] or none"
    )


def storage_options(pairs: Sequence[str], flag: str = "--storage-option") -> dict[str, Any] | None:
    """Read ``NAME=VALUE`` pairs (each VALUE as JSON when it is JSON); None for none.

    A pair without ``=`` ends the command with status 2 (bad arguments),
    as argparse ends it for a malformed value.
    """
    out: dict[str, Any] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            print(f"shardpipe: {flag} expects NAME=VALUE, got {pair!r}", file=sys.stderr)
            raise SystemExit(2)  # bad arguments
        try:
            out[name] = json.loads(value)
        except json.JSONDecodeError:
            out[name] = value
    return out or None


def store_and_path(args: argparse.Namespace) -> str:
    """``STORE`` or ``STORE (path 'PATH')``, as failures name what they were given."""
    where: str = args.store
    return where + (f" (path {args.path!r})" if args.path else "")


# Where: the store, the array in it, how to reach it.

PATH = Option(("--path",), "path of the array inside the store", {"default": None})

STORAGE_OPTION = Option(
    ("--storage-option",),
    "fsspec option (VALUE parsed as JSON when it can be); repeatable",
    {"action": "append", "default": [], "metavar": "NAME=VALUE"},
)
SOURCE_STORAGE_OPTION = Option(
    ("--source-storage-option",),
    "fsspec option for SOURCE; repeatable",
    {"action": "append", "default": [], "metavar": "NAME=VALUE"},
)
TARGET_STORAGE_OPTION = Option(
    ("--target-storage-option",),
    "fsspec option for a TARGET elsewhere (default: those of SOURCE); repeatable",
    {"action": "append", "default": [], "metavar": "NAME=VALUE"},
)
GROUP = Option(("--group",), "group inside the store", {"default": None})

# The layout and codecs of a sharded array written.

SHARD_SHAPE = Option(("--shards",), "shard shape, e.g. 256,256,256", {"type": int_tuple})
CHUNK_SHAPE = Option(("--chunks",), "inner chunk shape, e.g. 64,64,64", {"type": int_tuple})
SHARD_SIZES = Option(("--shards",), "shard size per dimension: time=365,...", {"type": dim_sizes})
CHUNK_SIZES = Option(("--chunks",), "inner chunk size per dimension", {"type": dim_sizes})
COMPRESSOR = Option(
    ("--compressor",), "zstd[:level] ...", {"type": parse_compressor, "default": "zstd"}
)
INDEX_LOCATION = Option(
    ("--index-location",), None, {"default": "end", "choices": ["end", "start"]}
)
NO_CHUNK_CHECKSUMS = Option(
    ("--no-chunk-checksums",),
    "write inner chunks without a crc32c checksum (4 bytes smaller each; bit flips inside "
    "compressed chunks then go undetected)",
    {"action": "store_true"},
)

# How a command runs.

MAX_MEM = Option(
    ("--max-mem",), f"memory budget per task ({DEFAULT_MAX_MEM})", {"default": DEFAULT_MAX_MEM}
)
PROGRESS = Option(("--progress",), "show a progress bar", {"action": "store_true"})
NO_PROGRESS = Option(
    ("--no-progress",), "no progress bar", {"action": "store_false", "dest": "progress"}
)
SCHEDULER = Option(("--scheduler",), "address of a Dask scheduler to use", {"default": None})
CLUSTER_WORKERS = Option(
    ("--workers",), "start a LocalCluster of N worker processes", {"type": int, "default": None}
)
COPY_WORKERS = Option(("--workers",), "shards copied at once (8)", {"type": int, "default": 8})
OVERWRITE = Option(("--overwrite",), "replace TARGET if it exists", {"action": "store_true"})
RESUME = Option(
    ("--resume",),
    "carry on an interrupted run of the same command: keep complete shards",
    {"action": "store_true"},
)
APPEND_DIM = Option(
    ("--append-dim",), "append SOURCE along this dimension (axis)", {"default": None}
)
DRY_RUN = Option(("--dry-run",), "print the plan, write nothing", {"action": "store_true"})
FORCE = Option(
    ("--force",),
    "take over from a job shardpipe cannot prove dead (it ran on another machine)",
    {"action": "store_true"},
)

# Icechunk repositories: what to read of one, and a write into one as one commit.

ICECHUNK = Option(
    ("--icechunk",),
    "the store is an Icechunk repository (local path or s3:// URL)",
    {"action": "store_true"},
)
BRANCH = Option(("--branch",), "with --icechunk: branch (main)", {"default": None})
SNAPSHOT = Option(("--snapshot",), "with --icechunk: snapshot id to read", {"default": None})
COMMIT = Option(
    ("--commit",), "with --icechunk: commit message (default: the command)", {"default": None}
)
REBASE = Option(
    ("--rebase",),
    "with --icechunk: rebase onto commits made meanwhile that changed other shards",
    {"action": "store_true"},
)


def add_store(command: argparse.ArgumentParser, what: str) -> None:
    """The positional STORE (``what`` it holds), ``--path`` and ``--storage-option``."""
    command.add_argument("store", help=f"local path or fsspec URL of the {what}")
    PATH.add(command)
    STORAGE_OPTION.add(command)


def add_array_layout(command: argparse.ArgumentParser, checksums_help: str | None = None) -> None:
    """Shard and chunk shapes, ``--max-mem``, ``--compressor``, ``--index-location``,
    ``--no-chunk-checksums`` (its help worded by ``checksums_help``)."""
    SHARD_SHAPE.add(command)
    CHUNK_SHAPE.add(command)
    MAX_MEM.add(command)
    COMPRESSOR.add(command)
    INDEX_LOCATION.add(command)
    NO_CHUNK_CHECKSUMS.add(command, checksums_help)


def add_progress(command: argparse.ArgumentParser, *, shown: bool) -> None:
    """``args.progress``: ``--no-progress`` where a bar is ``shown`` by default, else
    ``--progress``."""
    (NO_PROGRESS if shown else PROGRESS).add(command)


def add_compute(command: argparse.ArgumentParser) -> None:
    """Where the Dask work runs: ``--scheduler ADDRESS`` or ``--workers N`` (threads if
    neither; see :mod:`shardpipe.cli.compute`)."""
    where = command.add_mutually_exclusive_group()
    SCHEDULER.add(where)
    CLUSTER_WORKERS.add(where)


def add_icechunk_reading(command: argparse.ArgumentParser) -> None:
    """``--icechunk`` (the store is an Icechunk repository) and a branch or snapshot to read."""
    ICECHUNK.add(command)
    BRANCH.add(command, "with --icechunk: branch to read (main)")
    SNAPSHOT.add(command)


def add_icechunk_writing(command: argparse.ArgumentParser, what: str) -> None:
    """``--icechunk`` (TARGET is a repository, the write one commit), ``--branch``,
    ``--commit``, ``--rebase``; ``what`` names the write in the help ("the rechunk")."""
    ICECHUNK.add(
        command,
        "TARGET is an Icechunk repository (local path or s3:// URL; created if absent): "
        f"{what} is one commit on --branch",
    )
    BRANCH.add(command)
    COMMIT.add(command)
    REBASE.add(command)
