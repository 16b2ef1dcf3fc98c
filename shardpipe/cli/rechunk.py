"""The ``shardpipe rechunk`` command: plan (``--dry-run``) or run a rechunk into shards."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

from shardpipe.cli.exit_statuses import EXPECTED, exit_status, fail
from shardpipe.cli.icechunk_options import add_writing as add_icechunk_writing
from shardpipe.cli.icechunk_options import commit_arguments, planning_session, writable_session
from shardpipe.core.checks import check_int
from shardpipe.errors import InvalidArgumentError
from shardpipe.write.arguments import check_array_overrides


def add_command(
    commands: Any,
    ints: Callable[[str], tuple[int, ...]],
    compressor: Callable[[str], Any],
    add_storage_option: Callable[[argparse.ArgumentParser], None],
) -> None:
    """Add ``rechunk`` to the subcommands of the parser."""
    command = commands.add_parser(
        "rechunk",
        help="rechunk a Zarr v2/v3 array into a sharded Zarr v3 array in bounded memory",
        description="Read SOURCE in blocks aligned to its chunks, as large as --max-mem allows, "
        "and write TARGET sharded. Fill value, dimension names and attributes carry over; the "
        "codecs are the target's defaults unless --compressor is given.",
    )
    command.add_argument("source", help="local path or fsspec URL of the Zarr array to read")
    command.add_argument("target", help="local path or fsspec URL to write")
    command.add_argument("--path", default=None, help="path of the array inside TARGET")
    command.add_argument("--shards", type=ints, help="shard shape, e.g. 256,256,256")
    command.add_argument("--chunks", type=ints, help="inner chunk shape, e.g. 64,64,64")
    command.add_argument("--max-mem", default="1GiB", help="memory budget per task (1GiB)")
    command.add_argument("--compressor", type=compressor, default="zstd", help="zstd[:level] ...")
    command.add_argument("--index-location", default="end", choices=["end", "start"])
    command.add_argument(
        "--no-chunk-checksums",
        action="store_true",
        help="write inner chunks without a crc32c checksum (4 bytes smaller each; bit flips "
        "inside compressed chunks then go undetected)",
    )
    command.add_argument("--overwrite", action="store_true", help="replace TARGET if it exists")
    command.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")
    command.add_argument(
        "--temp-store",
        default=None,
        help="where a two-pass rechunk may keep an intermediate copy (deleted afterwards)",
    )
    command.add_argument(
        "--resume",
        action="store_true",
        help="carry on an interrupted run of the same command: keep complete shards",
    )
    command.add_argument("--no-progress", action="store_true", help="no progress bar")
    command.add_argument(
        "--recursive",
        action="store_true",
        help="SOURCE is a group: rechunk every array in it, keeping the hierarchy",
    )
    command.add_argument(
        "--config",
        default=None,
        help='with --recursive: a JSON file {"arrays": {"PATH": {"shards": [...], '
        '"chunks": [...]}}} of per-array shapes',
    )
    add_compute_options(command, add_storage_option)
    add_icechunk_writing(command, "the rechunk")


def add_compute_options(
    command: argparse.ArgumentParser,
    add_storage_option: Callable[[argparse.ArgumentParser], None],
) -> None:
    """``--scheduler`` or ``--workers``, and the storage options of TARGET and SOURCE."""
    where = command.add_mutually_exclusive_group()
    where.add_argument("--scheduler", default=None, help="address of a Dask scheduler to use")
    where.add_argument(
        "--workers", type=int, default=None, help="start a LocalCluster of N worker processes"
    )
    add_storage_option(command)
    command.add_argument(
        "--source-storage-option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="fsspec option for SOURCE; repeatable",
    )


def run(
    args: argparse.Namespace,
    options: dict[str, Any] | None,
    source_options: dict[str, Any] | None,
) -> int:
    """Run ``rechunk``; return the exit status (1: the rechunk failed, 2: it could not start)."""
    target: Any = args.target
    exists, repository_options = True, options
    try:
        if args.workers is not None:
            check_int("--workers", args.workers, example=4)
        if args.config is not None and not args.recursive:
            raise InvalidArgumentError(
                "--config", "gives per-array shapes of a group", "Add --recursive, or leave it out"
            )
        arrays = _per_array_shapes(args.config)
        commit = commit_arguments(args, "rechunk")
        if args.icechunk:  # plan first: a new repository is created once the plan is accepted
            target, exists = planning_session(args, options)
            options = None
    except EXPECTED as err:
        return fail("rechunk", err)
    common: dict[str, Any] = dict(
        shards=args.shards,
        chunks=args.chunks,
        max_mem=args.max_mem,
        compressors=args.compressor,
        chunk_checksums=not args.no_chunk_checksums,
        index_location=args.index_location,
        storage_options=options,
        source_storage_options=source_options,
        overwrite=args.overwrite,
        resume=args.resume,
    )

    def plan(target: Any) -> Any:
        if args.recursive:
            from shardpipe.rechunking.group import plan_group_rechunk

            return plan_group_rechunk(args.source, target, arrays=arrays, **common)
        from shardpipe.rechunking.api import plan_rechunk

        return plan_rechunk(
            args.source, target, path=args.path, temp_store=args.temp_store, **common
        )

    try:
        job = plan(target)
        if args.icechunk and not exists and not args.dry_run:
            job = plan(writable_session(args, repository_options))
    except EXPECTED as err:
        return fail("rechunk", err)
    print(job)
    if args.dry_run:
        return 0
    try:
        with scheduler(args.scheduler, args.workers):
            report = job.execute(progress=not args.no_progress, **commit)
    except Exception as err:  # a task's failure: say so, and how to carry on
        carry_on = (
            "nothing was committed; run the same command again"
            if args.icechunk
            else "complete shards are kept: run the same command with --resume to write the rest"
        )
        print(
            f"shardpipe rechunk: failed ({type(err).__name__}: {err}); {carry_on}",
            file=sys.stderr,
        )
        return exit_status(err, during_work=True)
    print(report)
    return 0


def _per_array_shapes(config: str | None) -> dict[str, dict[str, tuple[int, ...]]]:
    """Read ``{"arrays": {path: {"shards": [...], "chunks": [...]}}}`` from a JSON file."""
    if config is None:
        return {}
    import json

    fix = 'Give a JSON file {"arrays": {"PATH": {"shards": [...], "chunks": [...]}}}'
    try:
        with open(config, encoding="utf-8") as text:
            document = json.load(text)
    except (OSError, ValueError) as err:
        raise InvalidArgumentError("--config", f"cannot read {config!r} ({err})", fix) from None
    arrays = document.get("arrays", {}) if isinstance(document, dict) else None
    if not isinstance(arrays, dict):
        raise InvalidArgumentError("--config", f"{config!r} has no 'arrays' object", fix)
    try:
        return check_array_overrides(arrays)
    except InvalidArgumentError as err:
        raise InvalidArgumentError("--config", f"{config!r}: {err.problem}", err.fix) from None


@contextlib.contextmanager
def scheduler(address: str | None, workers: int | None) -> Iterator[None]:
    """Compute on the given scheduler, on a LocalCluster of ``workers`` processes, or threads."""
    if address is None and workers is None:
        yield
        return
    from distributed import Client, LocalCluster

    if address is not None:
        with Client(address):
            yield
        return
    with (
        LocalCluster(n_workers=workers, threads_per_worker=1, dashboard_address=":0") as cluster,
        Client(cluster),
    ):
        yield
