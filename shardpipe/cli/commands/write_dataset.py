"""``shardpipe write-dataset``: a dataset xarray opens, written as sharded Zarr v3."""

from __future__ import annotations

import argparse
import warnings
from typing import Any

from shardpipe.cli import options as shared
from shardpipe.cli.compute import compute_on
from shardpipe.cli.failures import Failures
from shardpipe.cli.icechunk_sessions import commit_arguments, writable_session
from shardpipe.cli.subcommand import Subcommands, add_subcommand
from shardpipe.core.shard_update import STRATEGIES
from shardpipe.storage.local.contained import contained

NAME = "write-dataset"
SUMMARY = "write a dataset (Zarr v2/v3, or a file xarray opens) as sharded Zarr v3"
DETAILS = (
    "Open SOURCE with xarray (xr.open_zarr for Zarr stores, xr.open_dataset otherwise) and "
    "write it to TARGET with ds.shard.to_zarr: every data variable sharded, coordinates, "
    "attributes and CF encoding as xarray writes them."
)


def add_command(commands: Subcommands) -> None:
    """Add ``write-dataset`` to the commands of ``shardpipe``."""
    command = add_subcommand(commands, NAME, SUMMARY, DETAILS, run, _failures)
    command.add_argument("source", help="local path or fsspec URL of the dataset to read")
    command.add_argument(
        "target",
        help="local path or fsspec URL of the Zarr v3 store to write (with --icechunk: the "
        "repository)",
    )
    command.add_argument("--source-group", default=None, help="group inside SOURCE")
    shared.GROUP.add(command, "group inside TARGET")
    shared.SHARD_SIZES.add(command)
    shared.CHUNK_SIZES.add(command)
    command.add_argument(
        "--mode",
        choices=["w-", "w", "a", "r+"],
        default=None,
        help="as in Dataset.to_zarr: w- create (refused if anything is there), w overwrite, "
        "a append or add variables, r+ write a region of existing variables (default: w-; a "
        "with --append-dim, r+ with --region)",
    )
    shared.APPEND_DIM.add(command, "dimension to append along")
    shared.REGION.add(command)
    shared.COMPRESSOR.add(
        command,
        "codec of the inner chunks of the data variables a new dataset gets (not with --mode a "
        "or r+, --append-dim, --region): zstd[:level], gzip[:level], blosc[:cname[:clevel]] "
        "or none",
    )
    shared.MAX_MEM.add(command)
    command.add_argument(
        "--write-strategy",
        default="auto",
        choices=STRATEGIES,
        help="how updates of existing sharded variables rewrite their shards",
    )
    shared.NO_CHUNK_CHECKSUMS.add(
        command, "write the inner chunks of new sharded variables without a crc32c checksum"
    )
    command.add_argument(
        "--no-consolidated", action="store_true", help="do not write consolidated metadata"
    )
    shared.add_progress(command)
    shared.add_compute(command)
    shared.add_icechunk_writing(command, "the write")
    shared.STORAGE_OPTION.add(command)


def run(args: argparse.Namespace) -> int:
    """Run ``write-dataset``: print a report per array; return the exit status."""
    from shardpipe.dataset.arguments import check_arguments
    from shardpipe.dataset.write import keep_cf_encoding, to_zarr

    options = shared.storage_options(args.storage_option)
    target: Any = args.target
    given: dict[str, Any] = dict(
        shards=args.shards,
        chunks=args.chunks,
        mode=args.mode,
        append_dim=args.append_dim,
        region=args.region,
        group=args.group,
        consolidated=not args.no_consolidated,
        write_strategy=args.write_strategy,
        chunk_checksums=not args.no_chunk_checksums,
        max_mem=args.max_mem,
        progress=args.progress,
    )
    commit = commit_arguments(args, NAME)
    # the source's layout and codecs are not the target's: keep only its CF encoding
    ds = keep_cf_encoding(_open_source(args.source, args.source_group))
    if _creates(args):
        given["encoding"] = {name: {"compressors": args.compressor} for name in ds.data_vars}
    if args.icechunk:  # check first: a refused write creates no repository
        check_arguments(ds, **given)
        target, options = writable_session(args, options), None
    with compute_on(args.scheduler, args.workers):
        reports = to_zarr(ds, target, storage_options=options, **given, **commit)
    assert isinstance(reports, dict)
    print(reports)
    return 0


def _failures(args: argparse.Namespace) -> Failures:
    """Errors in one line; one that is not about the arguments ends as a failed write."""
    return Failures(during_work=True)


def _creates(args: argparse.Namespace) -> bool:
    """Whether the write makes a new dataset (whose variables take ``--compressor``)."""
    return args.mode in (None, "w-", "w") and args.append_dim is None and args.region is None


def _open_source(source: str, group: str | None) -> Any:
    import fsspec
    import xarray as xr

    from shardpipe.errors import InvalidArgumentError
    from shardpipe.storage.urls import check_location

    check_location("source", source)
    try:
        mapper = fsspec.get_mapper(source)
        if any(key in mapper for key in ("zarr.json", ".zgroup", ".zattrs", ".zmetadata")):
            with warnings.catch_warnings():
                # without consolidated metadata xarray reads the source key by key and advises
                # consolidating it: the source is only read here, so that advice is noise
                warnings.filterwarnings("ignore", "Failed to open Zarr store with consolidated")
                return xr.open_zarr(contained(source), group=group, chunks={})
        return xr.open_dataset(source, group=group, chunks={})
    except (FileNotFoundError, KeyError, ValueError) as err:  # nothing (readable) there
        raise InvalidArgumentError(
            "--source-group" if group else "source",
            f"cannot open {source!r}"
            + (f", group {group!r}," if group else "")
            + f" as a dataset ({type(err).__name__}: {err})",
            "Give a Zarr store or a file xarray opens (netCDF, ...); --source-group for a "
            "group inside it",
        ) from err
