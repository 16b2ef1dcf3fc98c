"""The ``shardpipe`` command line."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from shardpipe.verify import verify
from shardpipe.writer import cleanup


def _options(pairs: Sequence[str]) -> dict[str, object]:
    out: dict[str, object] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--storage-option expects NAME=VALUE, got {pair!r}")
        try:
            out[name] = json.loads(value)
        except json.JSONDecodeError:
            out[name] = value
    return out


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="shardpipe", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser(
        "verify",
        help="check every shard of a sharded Zarr v3 array",
        description="Check index CRC32C, ranges, overlaps and that every inner chunk decodes. "
        "Exits 1 when a problem is found.",
    )
    clean = commands.add_parser(
        "cleanup",
        help="remove staging files and abort uploads left by failed writes",
        description="Never run it while a write to the array is under way.",
    )
    for command in (check, clean):
        command.add_argument("store", help="local path or fsspec URL of the store")
        command.add_argument("--path", default=None, help="path of the array inside the store")
        command.add_argument(
            "--storage-option",
            action="append",
            default=[],
            metavar="NAME=VALUE",
            help="fsspec option (VALUE parsed as JSON when it can be); repeatable",
        )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    args = _parser().parse_args(argv)
    options = _options(args.storage_option) or None
    if args.command == "verify":
        try:
            report = verify(args.store, args.path, storage_options=options)
        except (OSError, ValueError, KeyError) as err:
            where = args.store + (f" (path {args.path!r})" if args.path else "")
            print(
                f"shardpipe verify: cannot open a sharded array at {where}: {err}", file=sys.stderr
            )
            return 2
        print(report)
        return 0 if report.ok else 1
    if args.command == "cleanup":
        removed = cleanup(args.store, args.path, storage_options=options)
        print(f"removed {removed} leftover(s)")
        return 0
    return 2  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":
    sys.exit(main())
