"""The ``shardpipe`` command line: plan, verify, maintain arrays; write and repair datasets.

Every command ends with one of the exit statuses listed at the end of this help.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from shardpipe.cli.convert_ome_zarr import add_command as add_convert_ome_command
from shardpipe.cli.convert_ome_zarr import run as run_convert_ome
from shardpipe.cli.datasets import add_commands as add_dataset_commands
from shardpipe.cli.datasets import run as run_dataset_command
from shardpipe.cli.exit_statuses import EXPECTED, fail, statuses_text
from shardpipe.cli.icechunk_options import add_reading as add_icechunk_reading
from shardpipe.cli.migrate import add_command as add_migrate_command
from shardpipe.cli.migrate import run as run_migrate
from shardpipe.cli.rechunk import add_command as add_rechunk_command
from shardpipe.cli.rechunk import run as run_rechunk
from shardpipe.cli.write_ome_zarr import add_command as add_write_ome_command
from shardpipe.cli.write_ome_zarr import run as run_write_ome
from shardpipe.cli.write_precomputed import add_command as add_precomputed_command
from shardpipe.cli.write_precomputed import run as run_precomputed


def _options(pairs: Sequence[str]) -> dict[str, object]:
    out: dict[str, object] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            print(f"shardpipe: --storage-option expects NAME=VALUE, got {pair!r}", file=sys.stderr)
            raise SystemExit(2)  # bad arguments
        try:
            out[name] = json.loads(value)
        except json.JSONDecodeError:
            out[name] = value
    return out


def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers such as 64,64,64, got {text!r}"
        ) from None
    return values


def parse_compressor(text: str) -> Any:
    """Parse ``zstd[:level]``, ``gzip[:level]``, ``blosc[:cname[:level]]`` or ``none``."""
    from zarr.codecs import BloscCodec, GzipCodec, ZstdCodec

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


def _add_store_arguments(command: argparse.ArgumentParser, what: str) -> None:
    command.add_argument("store", help=f"local path or fsspec URL of the {what}")
    command.add_argument("--path", default=None, help="path of the array inside the store")
    _add_storage_option(command)


def _add_storage_option(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--storage-option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="fsspec option (VALUE parsed as JSON when it can be); repeatable",
    )


def _add_progress(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--progress", action="store_true", help="show a progress bar over the shards checked"
    )


def _parser() -> argparse.ArgumentParser:
    from shardpipe import __version__

    parser = argparse.ArgumentParser(
        prog="shardpipe",
        description=__doc__,
        epilog=statuses_text(),
    )
    parser.add_argument("--version", action="version", version=f"shardpipe {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    plan = commands.add_parser(
        "plan",
        help="show how a write would run (shards, parts, tasks, memory) without writing",
        description="Plan the write of a source array (an existing zarr array, or a made-up "
        "shape, dtype and Dask blocks) into a sharded array at STORE; print the plan. "
        "Nothing is written.",
    )
    _add_store_arguments(plan, "target store")
    source = plan.add_mutually_exclusive_group(required=True)
    source.add_argument("--source", help="local path or fsspec URL of a zarr array to read")
    source.add_argument("--shape", type=_ints, help="shape of a made-up source, e.g. 512,1024,1024")
    plan.add_argument("--dtype", default="uint16", help="dtype of a made-up source (uint16)")
    plan.add_argument(
        "--blocks", type=_ints, help="Dask block shape (default: the source's chunks or shards)"
    )
    plan.add_argument("--shards", type=_ints, help="shard shape, e.g. 256,256,256")
    plan.add_argument("--chunks", type=_ints, help="inner chunk shape, e.g. 64,64,64")
    plan.add_argument("--max-mem", default="1GiB", help="memory budget per task (1GiB)")
    plan.add_argument(
        "--compressor", type=parse_compressor, default="zstd", help="zstd[:level] ..."
    )
    plan.add_argument("--index-location", default="end", choices=["end", "start"])
    plan.add_argument(
        "--no-chunk-checksums",
        action="store_true",
        help="plan inner chunks without a crc32c checksum (4 bytes smaller each; bit flips "
        "inside compressed chunks then go undetected)",
    )
    plan.add_argument("--overwrite", action="store_true", help="plan as if replacing STORE")
    check = commands.add_parser(
        "verify",
        help="check every shard present in a sharded Zarr v3 array",
        description="Check index CRC32C, ranges, overlaps and that every inner chunk decodes "
        "(and its CRC32C, where the chunks have one), in every shard present (found by "
        "listing; absent shards are counted) and that every key among the shards names a shard "
        "of the grid. Traces of an unfinished write are noted; with --complete they are "
        "problems. Exits 1 when a problem is found.",
    )
    _add_store_arguments(check, "store")
    add_icechunk_reading(check)
    check.add_argument(
        "--complete",
        action="store_true",
        help="also fail when a write is unfinished: its job record says so, staging data or "
        "a job marker is left",
    )
    _add_progress(check)
    clean = commands.add_parser(
        "cleanup",
        help="remove staging files and abort uploads left by failed writes",
        description="Never run it while a write to the array is under way.",
    )
    _add_store_arguments(clean, "store")
    about = commands.add_parser(
        "info",
        help="describe a sharded array: layout, codecs, shards, bytes used and unused",
        description="Reads zarr.json and every shard's index (no inner chunk).",
    )
    _add_store_arguments(about, "store")
    add_icechunk_reading(about)
    _add_progress(about)
    fix = commands.add_parser(
        "repair",
        help="roll back shards an interrupted update left, remove leftovers, verify",
        description="Restores every shard left mid-update to its state before that update, "
        "removes staging data and a dead job's marker, then verifies. Exits 1 when the "
        "array does not verify clean afterwards.",
    )
    _add_store_arguments(fix, "store")
    fix.add_argument(
        "--force",
        action="store_true",
        help="take over from a job shardpipe cannot prove dead (it ran on another machine)",
    )
    _add_progress(fix)
    pack = commands.add_parser(
        "compact",
        help="rewrite shards whose unused space is above a threshold",
        description="Kept inner chunks are copied as they are; each shard is replaced atomically.",
    )
    _add_store_arguments(pack, "store")
    pack.add_argument(
        "--threshold", type=float, default=0.1, help="unused share above which to rewrite (0.1)"
    )
    _add_progress(pack)
    add_rechunk_command(commands, _ints, parse_compressor, _add_storage_option)
    add_precomputed_command(commands, _ints, _add_storage_option)
    add_write_ome_command(commands, _ints, parse_compressor, _add_storage_option)
    add_convert_ome_command(commands, _ints, _add_storage_option)
    add_migrate_command(commands, _add_storage_option)
    add_dataset_commands(commands, _add_storage_option)
    return parser


def _plan(args: argparse.Namespace, options: dict[str, Any] | None) -> int:
    import dask.array as da

    from shardpipe.core.checks import (
        check_dtype,
        check_int_tuple,
        check_made_up_blocks,
        check_size_limit,
        shape_param,
    )
    from shardpipe.rechunking.source import open_source
    from shardpipe.write.prepare import prepare_write

    blocks = check_int_tuple("blocks", args.blocks)
    if args.source is not None:
        source = da.from_zarr(open_source(args.source, options).array)
        if blocks is not None:
            source = source.rechunk(blocks)
    else:
        dtype = check_dtype("dtype", args.dtype)
        shape = check_int_tuple("shape", args.shape) or ()
        check_size_limit("shape", shape, dtype.itemsize)
        shape_param("blocks", blocks, len(shape))
        check_made_up_blocks(shape, blocks, dtype.itemsize)
        source = da.empty(shape, dtype=dtype, chunks=blocks or "auto")
    job = prepare_write(
        source,
        args.store,
        path=args.path,
        shards=args.shards,
        chunks=args.chunks,
        compressors=args.compressor,
        chunk_checksums=not args.no_chunk_checksums,
        index_location=args.index_location,
        overwrite=args.overwrite,
        storage_options=options if args.source is None else None,
        max_mem=args.max_mem,
    )
    print(job)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    args = _parser().parse_args(argv)
    options = _options(args.storage_option) or None
    if args.command in ("write-dataset", "repair-dataset"):
        return run_dataset_command(args, options)
    if args.command == "rechunk":
        return run_rechunk(args, options, _options(args.source_storage_option) or None)
    if args.command == "write-precomputed":
        return run_precomputed(args, options, _options(args.source_storage_option) or None)
    if args.command in ("write-ome-zarr", "convert-ome-zarr"):
        run_ome = run_write_ome if args.command == "write-ome-zarr" else run_convert_ome
        return run_ome(args, options, _options(args.source_storage_option) or None)
    if args.command == "migrate":
        return run_migrate(args, options, _options(args.target_storage_option) or None)
    where = args.store + (f" (path {args.path!r})" if args.path else "")
    store: Any = args.store
    if getattr(args, "icechunk", False):
        from shardpipe.storage.icechunk.repository import open_session

        try:
            store = open_session(args.store, options, branch=args.branch, snapshot=args.snapshot)
        except EXPECTED as err:
            return fail(args.command, err, where=where)
        options = None
    if args.command == "plan":
        try:
            return _plan(args, options)
        except EXPECTED as err:
            return fail("plan", err)
    if args.command == "verify":
        from shardpipe.maintenance.verification import verify

        try:
            report = verify(
                store,
                args.path,
                storage_options=options,
                complete=args.complete,
                progress=args.progress,
            )
        except EXPECTED as err:
            return fail("verify", err, where=f"cannot check a sharded array at {where}")
        print(report)
        return 0 if report.ok else 1
    if args.command in ("info", "repair", "compact"):
        from shardpipe.maintenance import upkeep as maintenance

        try:
            common: dict[str, Any] = dict(storage_options=options, progress=args.progress)
            if args.command == "info":
                print(maintenance.info(store, args.path, **common))
                return 0
            if args.command == "compact":
                compacted = maintenance.compact(
                    args.store, args.path, threshold=args.threshold, **common
                )
                print(compacted)
                return 0
            fixed = maintenance.repair(args.store, args.path, force=args.force, **common)
        except EXPECTED as err:
            return fail(args.command, err, where=where)
        print(fixed)
        return 0 if fixed.ok else 1
    if args.command == "cleanup":
        from shardpipe.write.api import cleanup

        try:
            removed = cleanup(args.store, args.path, storage_options=options)
        except EXPECTED as err:
            return fail("cleanup", err, where=where)
        print(f"removed {removed} leftover(s)")
        return 0
    return 2  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":
    sys.exit(main())
