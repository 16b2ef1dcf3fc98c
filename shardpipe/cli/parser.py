"""The ``shardpipe`` command line: plan, verify, maintain arrays; write and repair datasets.

Every command ends with one of the exit statuses listed at the end of this help.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from shardpipe.cli import options as shared
from shardpipe.cli.datasets import add_commands as add_dataset_commands
from shardpipe.cli.datasets import run as run_dataset_command
from shardpipe.cli.exit_statuses import EXPECTED, fail, statuses_text
from shardpipe.cli.icechunk_sessions import reading_session
from shardpipe.cli.migrate import add_command as add_migrate_command
from shardpipe.cli.migrate import run as run_migrate
from shardpipe.cli.rechunk import add_command as add_rechunk_command
from shardpipe.cli.rechunk import run as run_rechunk
from shardpipe.cli.write_precomputed import add_command as add_precomputed_command
from shardpipe.cli.write_precomputed import run as run_precomputed


def _parser() -> argparse.ArgumentParser:
    from shardpipe._version import __version__

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
    shared.add_store(plan, "target store")
    source = plan.add_mutually_exclusive_group(required=True)
    source.add_argument("--source", help="local path or fsspec URL of a zarr array to read")
    source.add_argument(
        "--shape", type=shared.int_tuple, help="shape of a made-up source, e.g. 512,1024,1024"
    )
    plan.add_argument("--dtype", default="uint16", help="dtype of a made-up source (uint16)")
    plan.add_argument(
        "--blocks",
        type=shared.int_tuple,
        help="Dask block shape (default: the source's chunks or shards)",
    )
    shared.add_array_layout(
        plan,
        "plan inner chunks without a crc32c checksum (4 bytes smaller each; bit flips inside "
        "compressed chunks then go undetected)",
    )
    shared.OVERWRITE.add(plan, "plan as if replacing STORE")
    check = commands.add_parser(
        "verify",
        help="check every shard present in a sharded Zarr v3 array",
        description="Check index CRC32C, ranges, overlaps and that every inner chunk decodes "
        "(and its CRC32C, where the chunks have one), in every shard present (found by "
        "listing; absent shards are counted) and that every key among the shards names a shard "
        "of the grid. Traces of an unfinished write are noted; with --complete they are "
        "problems. Exits 1 when a problem is found.",
    )
    shared.add_store(check, "store")
    shared.add_icechunk_reading(check)
    check.add_argument(
        "--complete",
        action="store_true",
        help="also fail when a write is unfinished: its job record says so, staging data or "
        "a job marker is left",
    )
    shared.add_progress(check, shown=False)
    clean = commands.add_parser(
        "cleanup",
        help="remove staging files and abort uploads left by failed writes",
        description="Never run it while a write to the array is under way.",
    )
    shared.add_store(clean, "store")
    about = commands.add_parser(
        "info",
        help="describe a sharded array: layout, codecs, shards, bytes used and unused",
        description="Reads zarr.json and every shard's index (no inner chunk).",
    )
    shared.add_store(about, "store")
    shared.add_icechunk_reading(about)
    shared.add_progress(about, shown=False)
    fix = commands.add_parser(
        "repair",
        help="roll back shards an interrupted update left, remove leftovers, verify",
        description="Restores every shard left mid-update to its state before that update, "
        "removes staging data and a dead job's marker, then verifies. Exits 1 when the "
        "array does not verify clean afterwards.",
    )
    shared.add_store(fix, "store")
    shared.FORCE.add(fix)
    shared.add_progress(fix, shown=False)
    pack = commands.add_parser(
        "compact",
        help="rewrite shards whose unused space is above a threshold",
        description="Kept inner chunks are copied as they are; each shard is replaced atomically.",
    )
    shared.add_store(pack, "store")
    pack.add_argument(
        "--threshold", type=float, default=0.1, help="unused share above which to rewrite (0.1)"
    )
    shared.add_progress(pack, shown=False)
    add_rechunk_command(commands)
    add_precomputed_command(commands)
    add_migrate_command(commands)
    add_dataset_commands(commands)
    return parser


def _plan(args: argparse.Namespace, options: dict[str, Any] | None) -> int:
    import dask.array as da
    import dask.config
    from dask.utils import parse_bytes

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
        auto_block_nbytes = int(parse_bytes(dask.config.get("array.chunk-size")))
        check_made_up_blocks(shape, blocks, dtype.itemsize, auto_block_nbytes)
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
    options = shared.storage_options(args.storage_option)
    if args.command in ("write-dataset", "repair-dataset"):
        return run_dataset_command(args, options)
    if args.command == "rechunk":
        return run_rechunk(args, options)
    if args.command == "write-precomputed":
        return run_precomputed(args, options)
    if args.command == "migrate":
        return run_migrate(args, options)
    where = shared.store_and_path(args)
    store: Any = args.store
    if getattr(args, "icechunk", False):
        try:
            store = reading_session(args, options)
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
        from shardpipe.maintenance.array_info import info
        from shardpipe.maintenance.compaction import compact
        from shardpipe.maintenance.repairs import repair

        try:
            common: dict[str, Any] = dict(storage_options=options, progress=args.progress)
            if args.command == "info":
                print(info(store, args.path, **common))
                return 0
            if args.command == "compact":
                compacted = compact(args.store, args.path, threshold=args.threshold, **common)
                print(compacted)
                return 0
            fixed = repair(args.store, args.path, force=args.force, **common)
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
