"""Options that several commands take, each defined once: its flags, meaning, default, help.

A command adds a shared option with ``OPTION.add(command)``, or a block of
them with the ``add_*`` functions below. The help may be worded for the
command (``help=``); what the option means (destination, type, default,
choices) may not change. The readers of option values (``64,64,64``,
``time=365``, ``zstd:3``, ``NAME=VALUE``) live here too, so that a value is
read the same way by every command. tests/cli checks that every flag that
several commands take is defined here, and means one thing in all of them.

Two flags are read two ways: ``--shards``/``--chunks`` are shapes for
arrays and sizes by dimension name for datasets. ``migrate --workers`` (shards
copied at once) is now ``--copy-concurrency``; the old spelling is read with a
warning until 0.3.0 (:data:`DEPRECATED_COPY_WORKERS`), and ``--workers`` is
otherwise the number of LocalCluster processes.
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


class DeprecatedFlag(argparse.Action):
    """A flag's old spelling: stores its value as the new flag does and warns on stderr.

    ``new_flag`` (an extra keyword of ``add_argument``) names the flag to use instead.
    """

    def __init__(self, option_strings: Sequence[str], dest: str, new_flag: str, **kwargs: Any):
        super().__init__(option_strings, dest, **kwargs)
        self.new_flag = new_flag

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        print(
            f"{parser.prog}: {option_string} is deprecated and will be removed in 0.3.0; "
            f"use {self.new_flag}",
            file=sys.stderr,
        )
        setattr(namespace, self.dest, values)


class NameValuePairs(argparse.Action):
    """``--storage-option A=1 B=2``: one or more ``NAME=VALUE`` pairs, the flag repeatable.

    The pairs of every use are collected in one list, in order. A word
    without ``=`` is refused here, while it is still known where it stood:
    most often it is a positional argument put after the pairs.
    """

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        for value in values:
            name, sep, _ = value.partition("=")
            if not sep or not name:
                raise argparse.ArgumentError(
                    self,
                    f"expected NAME=VALUE pairs, got {value!r}; if it is a positional "
                    f"argument, put it before {option_string}",
                )
        setattr(namespace, self.dest, [*(getattr(namespace, self.dest) or []), *values])


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


def dim_region(text: str) -> dict[str, slice] | str:
    """Read ``time=10:20,lat=0:360`` as ``{"time": slice(10, 20), "lat": slice(0, 360)}``;
    ``auto`` as it is (found from the coordinates, as xarray does)."""
    if text == "auto":
        return text
    region: dict[str, slice] = {}
    for item in text.split(","):
        name, sep, bounds = item.partition("=")
        start, colon, stop = bounds.partition(":")
        try:
            region[name.strip()] = slice(int(start), int(stop))
        except ValueError:
            colon = ""
        if not (sep and colon and name.strip()):
            raise argparse.ArgumentTypeError(
                f"expected auto or DIM=START:STOP pairs such as time=10:20,lat=0:360, got {text!r}"
            )
    return region


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
    "fsspec options, e.g. key=... secret=... endpoint_url=http://host:9000 (each VALUE "
    "parsed as JSON when it can be); one or more pairs, the flag repeatable",
    {"action": NameValuePairs, "nargs": "+", "default": [], "metavar": "NAME=VALUE"},
)
SOURCE_STORAGE_OPTION = Option(
    ("--source-storage-option",),
    "fsspec options for SOURCE, as --storage-option",
    {"action": NameValuePairs, "nargs": "+", "default": [], "metavar": "NAME=VALUE"},
)
TARGET_STORAGE_OPTION = Option(
    ("--target-storage-option",),
    "fsspec options for a TARGET elsewhere, as --storage-option (default: those of SOURCE)",
    {"action": NameValuePairs, "nargs": "+", "default": [], "metavar": "NAME=VALUE"},
)
GROUP = Option(("--group",), "group inside the store", {"default": None})

# The layout and codecs of a sharded array written.

SHARD_SHAPE = Option(("--shards",), "shard shape, e.g. 256,256,256", {"type": int_tuple})
CHUNK_SHAPE = Option(("--chunks",), "inner chunk shape, e.g. 64,64,64", {"type": int_tuple})
SHARD_SIZES = Option(("--shards",), "shard size per dimension: time=365,...", {"type": dim_sizes})
CHUNK_SIZES = Option(("--chunks",), "inner chunk size per dimension", {"type": dim_sizes})
COMPRESSOR = Option(
    ("--compressor",),
    "codec of the inner chunks: zstd[:level], gzip[:level], blosc[:cname[:clevel]] or none; "
    "levels zstd 3, gzip 5, blosc zstd 5 unless given",
    {"type": parse_compressor, "default": "zstd"},
)
REGION = Option(
    ("--region",),
    "write SOURCE into this part of existing variables: DIM=START:STOP[,...] (indices), or "
    "auto to find it from the coordinates",
    {"type": dim_region, "default": None},
)
INDEX_LOCATION = Option(
    ("--index-location",),
    "where each shard keeps its index (default: end; start on Azure, whose reads cannot ask "
    "for an object's last bytes)",
    {"default": None, "choices": ["end", "start"]},
)
NO_CHUNK_CHECKSUMS = Option(
    ("--no-chunk-checksums",),
    "write inner chunks without a crc32c checksum (4 bytes smaller each; bit flips inside "
    "compressed chunks then go undetected)",
    {"action": "store_true"},
)

# How a command runs.

MAX_MEM = Option(("--max-mem",), "memory budget per task", {"default": DEFAULT_MAX_MEM})
PROGRESS = Option(
    ("--progress",),
    "show a progress bar on stderr even when it is not a terminal (default: a bar when "
    "stderr is a terminal)",
    {"action": "store_const", "const": True, "default": None},
)
NO_PROGRESS = Option(
    ("--no-progress",),
    "no progress bar, even on a terminal",
    {"action": "store_const", "const": False, "dest": "progress", "default": None},
)
SCHEDULER = Option(("--scheduler",), "address of a Dask scheduler to use", {"default": None})
CLUSTER_WORKERS = Option(
    ("--workers",), "start a LocalCluster of N worker processes", {"type": int, "default": None}
)
COPY_CONCURRENCY = Option(
    ("--copy-concurrency",), "shards copied at once", {"type": int, "default": 8, "metavar": "N"}
)
DEPRECATED_COPY_WORKERS = Option(
    ("--workers",),
    argparse.SUPPRESS,
    {
        "type": int,
        "dest": "copy_concurrency",
        "action": DeprecatedFlag,
        "new_flag": "--copy-concurrency",
    },
)
"""``migrate --workers``, the old spelling of ``--copy-concurrency``: still read, with a
warning, until 0.3.0 (``--workers`` is the number of LocalCluster processes elsewhere)."""
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
BRANCH = Option(("--branch",), "with --icechunk: branch (default: main)", {"default": None})
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


def add_progress(command: argparse.ArgumentParser) -> None:
    """``--progress`` and ``--no-progress``, one policy for every command: ``args.progress``
    is None unless one is given, and :func:`show_progress` decides then."""
    either = command.add_mutually_exclusive_group()
    PROGRESS.add(either)
    NO_PROGRESS.add(either)


def show_progress(args: argparse.Namespace) -> None:
    """Settle ``args.progress`` (if the command has it): as given, else a bar exactly when
    stderr, where bars are drawn, is a terminal."""
    if getattr(args, "progress", False) is None:
        args.progress = sys.stderr.isatty()


def add_compute(command: argparse.ArgumentParser) -> None:
    """Where the Dask work runs: ``--scheduler ADDRESS`` or ``--workers N`` (threads if
    neither; see :mod:`shardpipe.cli.compute`)."""
    where = command.add_mutually_exclusive_group()
    SCHEDULER.add(where)
    CLUSTER_WORKERS.add(where)


def add_icechunk_reading(command: argparse.ArgumentParser) -> None:
    """``--icechunk`` (the store is an Icechunk repository) and a branch or snapshot to read."""
    ICECHUNK.add(command)
    BRANCH.add(command, "with --icechunk: branch to read (default: main)")
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
