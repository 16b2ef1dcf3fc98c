"""``shardpipe rechunk``: plan (``--dry-run``) or run a rechunk into shards."""

from __future__ import annotations

import argparse
import json
from typing import Any

from shardpipe.cli import options as shared
from shardpipe.cli.compute import compute_on
from shardpipe.cli.failures import Failures, step
from shardpipe.cli.icechunk_sessions import commit_arguments, planning_session, writable_session
from shardpipe.cli.subcommand import Subcommands, add_subcommand
from shardpipe.core.checks import check_int
from shardpipe.errors import InvalidArgumentError
from shardpipe.rechunking.options import check_array_overrides

NAME = "rechunk"
SUMMARY = "rechunk a Zarr v2/v3 array into a sharded Zarr v3 array in bounded memory"
DETAILS = (
    "Read SOURCE in blocks aligned to its chunks, as large as --max-mem allows, and write "
    "TARGET sharded. Fill value, dimension names and attributes carry over; the codecs are "
    "the target's defaults unless --compressor is given."
)


def add_command(commands: Subcommands) -> None:
    """Add ``rechunk`` to the commands of ``shardpipe``."""
    command = add_subcommand(commands, NAME, SUMMARY, DETAILS, run)
    command.add_argument("source", help="local path or fsspec URL of the Zarr array to read")
    command.add_argument("target", help="local path or fsspec URL to write")
    shared.PATH.add(command, "path of the array inside TARGET")
    shared.add_array_layout(command)
    shared.OVERWRITE.add(command)
    shared.DRY_RUN.add(command)
    command.add_argument(
        "--temp-store",
        default=None,
        help="where a two-pass rechunk may keep an intermediate copy (deleted afterwards)",
    )
    shared.RESUME.add(command)
    shared.add_progress(command)
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
    shared.add_compute(command)
    shared.STORAGE_OPTION.add(command)
    shared.SOURCE_STORAGE_OPTION.add(command)
    shared.add_icechunk_writing(command, "the rechunk")


def run(args: argparse.Namespace) -> int:
    """Run ``rechunk``; return the exit status (1: the rechunk failed, 2: it could not start)."""
    options = shared.storage_options(args.storage_option)
    source_options = shared.storage_options(args.source_storage_option, "--source-storage-option")
    target: Any = args.target
    exists, repository_options = True, options
    if args.workers is not None:
        check_int("--workers", args.workers, example=4)
    if args.config is not None and not args.recursive:
        raise InvalidArgumentError(
            "--config", "gives per-array shapes of a group", "Add --recursive, or leave it out"
        )
    arrays = _per_array_shapes(args.config)
    commit = commit_arguments(args, NAME)
    if args.icechunk:  # plan first: a new repository is created once the plan is accepted
        target, exists = planning_session(args, options)
        options = None
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

    job = plan(target)
    if args.icechunk and not exists and not args.dry_run:
        job = plan(writable_session(args, repository_options))
    print(job)
    if args.dry_run:
        return 0
    carry_on = (
        "nothing was committed; run the same command again"
        if args.icechunk
        else "complete shards are kept: run the same command with --resume to write the rest"
    )
    # a task's failure, whatever it raised: say so, and how to carry on
    failed_run = Failures(as_task_failure=True, carry_on=carry_on, catches=(Exception,))
    with step(failed_run), compute_on(args.scheduler, args.workers):
        report = job.execute(progress=args.progress, **commit)
    print(report)
    return 0


def _per_array_shapes(config: str | None) -> dict[str, dict[str, tuple[int, ...]]]:
    """Read ``{"arrays": {path: {"shards": [...], "chunks": [...]}}}`` from a JSON file."""
    if config is None:
        return {}
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
