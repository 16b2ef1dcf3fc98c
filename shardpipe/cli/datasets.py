"""The dataset commands of the ``shardpipe`` command line: ``write-dataset``, ``repair-dataset``."""

from __future__ import annotations

import argparse
import warnings
from typing import Any

from shardpipe.cli import options as shared
from shardpipe.cli.exit_statuses import EXPECTED, fail
from shardpipe.cli.icechunk_sessions import commit_arguments, writable_session
from shardpipe.storage.local.contained import contained


def add_commands(commands: Any) -> None:
    """Add ``write-dataset`` and ``repair-dataset`` to the subcommands of the parser."""
    write = commands.add_parser(
        "write-dataset",
        help="write a dataset (Zarr v2/v3, or a file xarray opens) as sharded Zarr v3",
        description="Open SOURCE with xarray (xr.open_zarr for Zarr stores, xr.open_dataset "
        "otherwise) and write it to TARGET with ds.shard.to_zarr: every data variable sharded, "
        "coordinates, attributes and CF encoding as xarray writes them.",
    )
    write.add_argument("source", help="local path or fsspec URL of the dataset to read")
    write.add_argument(
        "target",
        help="local path or fsspec URL of the Zarr v3 store to write (with --icechunk: the "
        "repository)",
    )
    write.add_argument("--source-group", default=None, help="group inside SOURCE")
    shared.GROUP.add(write, "group inside TARGET")
    shared.SHARD_SIZES.add(write)
    shared.CHUNK_SIZES.add(write)
    write.add_argument("--mode", choices=["w-", "w", "a", "r+"], default=None)
    write.add_argument("--append-dim", default=None, help="dimension to append along")
    shared.MAX_MEM.add(write)
    write.add_argument("--write-strategy", default="auto")
    shared.NO_CHUNK_CHECKSUMS.add(
        write, "write the inner chunks of new sharded variables without a crc32c checksum"
    )
    write.add_argument(
        "--no-consolidated", action="store_true", help="do not write consolidated metadata"
    )
    shared.add_progress(write, shown=False)
    shared.add_icechunk_writing(write, "the write")
    shared.STORAGE_OPTION.add(write)
    fix = commands.add_parser(
        "repair-dataset",
        help="repair every array of a dataset and cut them back to its last complete state",
        description="After an interrupted ds.shard.to_zarr: repairs every sharded array (see "
        "'repair') and resizes every array to its shape in the consolidated metadata, which "
        "the writer rewrites last. Exits 1 when an array does not verify clean afterwards.",
    )
    fix.add_argument("store", help="local path or fsspec URL of the dataset")
    shared.GROUP.add(fix)
    shared.FORCE.add(fix)
    shared.STORAGE_OPTION.add(fix)


def run(args: argparse.Namespace, options: dict[str, Any] | None) -> int:
    """Run ``write-dataset`` or ``repair-dataset``; return the exit status."""
    if args.command == "repair-dataset":
        from shardpipe.dataset.repair import repair_dataset

        try:
            repaired = repair_dataset(
                args.store, group=args.group, storage_options=options, force=args.force
            )
        except EXPECTED as err:
            return fail("repair-dataset", err, where=args.store)
        print(repaired)
        return 0 if repaired.ok else 1
    from shardpipe.dataset.arguments import check_arguments
    from shardpipe.dataset.write import keep_cf_encoding, to_zarr

    target: Any = args.target
    given: dict[str, Any] = dict(
        shards=args.shards,
        chunks=args.chunks,
        mode=args.mode,
        append_dim=args.append_dim,
        group=args.group,
        consolidated=not args.no_consolidated,
        write_strategy=args.write_strategy,
        chunk_checksums=not args.no_chunk_checksums,
        max_mem=args.max_mem,
        progress=args.progress,
    )
    try:
        commit = commit_arguments(args, "write-dataset")
        # the source's layout and codecs are not the target's: keep only its CF encoding
        ds = keep_cf_encoding(_open_source(args.source, args.source_group))
        if args.icechunk:  # check first: a refused write creates no repository
            check_arguments(ds, **given)
            target, options = writable_session(args, options), None
        reports = to_zarr(ds, target, storage_options=options, **given, **commit)
    except EXPECTED as err:
        return fail("write-dataset", err, during_work=True)
    assert isinstance(reports, dict)
    for name, report in reports.items():
        print(f"{name}: {report}")
    return 0


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
