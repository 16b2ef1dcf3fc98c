"""``shardpipe plan``: how a write would run (shards, parts, tasks, memory), nothing written."""

from __future__ import annotations

import argparse
from typing import Any

from shardpipe.cli import options as shared
from shardpipe.cli.subcommand import Subcommands, add_subcommand

NAME = "plan"
SUMMARY = "show how a write would run (shards, parts, tasks, memory) without writing"
DETAILS = (
    "Plan the write of a source array (an existing zarr array, or a made-up shape, dtype and "
    "Dask blocks) into a sharded array at STORE; print the plan. Nothing is written."
)


def add_command(commands: Subcommands) -> None:
    """Add ``plan`` to the commands of ``shardpipe``."""
    command = add_subcommand(commands, NAME, SUMMARY, DETAILS, run)
    shared.add_store(command, "target store")
    source = command.add_mutually_exclusive_group(required=True)
    source.add_argument("--source", help="local path or fsspec URL of a zarr array to read")
    shared.SOURCE_STORAGE_OPTION.add(command)
    source.add_argument(
        "--shape", type=shared.int_tuple, help="shape of a made-up source, e.g. 512,1024,1024"
    )
    command.add_argument("--dtype", default="uint16", help="dtype of a made-up source")
    command.add_argument(
        "--blocks",
        type=shared.int_tuple,
        help="Dask block shape (default: the source's chunks or shards)",
    )
    shared.add_array_layout(
        command,
        "plan inner chunks without a crc32c checksum (4 bytes smaller each; bit flips inside "
        "compressed chunks then go undetected)",
    )
    shared.OVERWRITE.add(command, "plan as if replacing STORE")


def run(args: argparse.Namespace) -> int:
    """Run ``plan``: print the plan; return the exit status."""
    options = shared.storage_options(args.storage_option)
    source_options = shared.storage_options(args.source_storage_option, "--source-storage-option")
    print(_plan(args, options, source_options))
    return 0


def _plan(
    args: argparse.Namespace,
    options: dict[str, Any] | None,
    source_options: dict[str, Any] | None,
) -> Any:
    """The write job planned (a ``ShardedWrite``; nothing written)."""
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
    from shardpipe.errors import InvalidArgumentError
    from shardpipe.rechunking.source import open_source
    from shardpipe.stored.places import check_source_options
    from shardpipe.write.prepare import prepare_write

    blocks = check_int_tuple("blocks", args.blocks)
    if args.source is not None:
        checked = check_source_options(args.source, source_options)
        source = da.from_zarr(open_source(args.source, checked).array)
        if blocks is not None:
            source = source.rechunk(blocks)
    else:
        if source_options:
            raise InvalidArgumentError(
                "--source-storage-option",
                "applies to a --source, and a made-up one (--shape) is read from nowhere",
                "Leave it out",
            )
        dtype = check_dtype("dtype", args.dtype)
        shape = check_int_tuple("shape", args.shape) or ()
        check_size_limit("shape", shape, dtype.itemsize)
        shape_param("blocks", blocks, len(shape))
        auto_block_nbytes = int(parse_bytes(dask.config.get("array.chunk-size")))
        check_made_up_blocks(shape, blocks, dtype.itemsize, auto_block_nbytes)
        source = da.empty(shape, dtype=dtype, chunks=blocks or "auto")
    return prepare_write(
        source,
        args.store,
        path=args.path,
        shards=args.shards,
        chunks=args.chunks,
        compressors=args.compressor,
        chunk_checksums=not args.no_chunk_checksums,
        index_location=args.index_location,
        overwrite=args.overwrite,
        storage_options=options,
        max_mem=args.max_mem,
    )
