"""``shardpipe write-precomputed``: a Zarr array as a sharded Neuroglancer precomputed volume."""

from __future__ import annotations

import argparse
import json
from typing import Any

from shardpipe.cli import options as shared
from shardpipe.cli.compute import compute_on
from shardpipe.cli.failures import reported_as_task_failures
from shardpipe.cli.subcommand import Subcommands, add_subcommand
from shardpipe.core.checks import check_int
from shardpipe.errors import InvalidArgumentError

NAME = "write-precomputed"
SUMMARY = "write a Zarr array as a sharded Neuroglancer precomputed volume (and pyramid)"
DETAILS = (
    "Read SOURCE (a Zarr v2/v3 array, local path or fsspec URL) indexed (x, y, z[, channel]) "
    "-- or (z, y, x) with --zyx -- and write TARGET as a sharded precomputed volume: the info "
    "file, then one task per shard file."
)


def add_command(commands: Subcommands) -> None:
    """Add ``write-precomputed`` to the commands of ``shardpipe``."""
    command = add_subcommand(commands, NAME, SUMMARY, DETAILS, run, reported_as_task_failures)
    command.add_argument("source", help="local path or fsspec URL of the Zarr array to read")
    command.add_argument("target", help="directory or fsspec URL of the volume to write")
    command.add_argument("--resolution", type=_floats, required=True, help="nm per voxel, x,y,z")
    command.add_argument(
        "--chunk-size", type=shared.int_tuple, required=True, help="voxels per chunk, x,y,z"
    )
    command.add_argument(
        "--voxel-offset", type=shared.int_tuple, default=(0, 0, 0), help="x,y,z of the first voxel"
    )
    command.add_argument(
        "--scales", type=_scales, default=None, help="factors, e.g. 1,1,1:2,2,1:4,4,2"
    )
    command.add_argument(
        "--encoding",
        default="raw",
        choices=["raw", "jpeg", "compressed_segmentation"],
        help="chunk encoding; with --sharding auto, raw and compressed_segmentation chunks are "
        "gzip'd in their shards",
    )
    command.add_argument(
        "--volume-type",
        default="image",
        choices=["image", "segmentation"],
        help="what the voxels are: intensities, or object labels",
    )
    command.add_argument(
        "--downsample",
        default="auto",
        choices=["auto", "mean", "mode"],
        help="how a coarser scale's voxel is made from finer ones (auto: mean for images, "
        "mode for segmentations)",
    )
    command.add_argument(
        "--sharding", default="auto", help="auto, or a neuroglancer_uint64_sharded_v1 JSON object"
    )
    command.add_argument("--zyx", action="store_true", help="SOURCE is indexed (z, y, x)")
    shared.MAX_MEM.add(command)
    shared.OVERWRITE.add(command, "replace a volume at TARGET")
    shared.add_progress(command)
    shared.add_compute(command)
    shared.STORAGE_OPTION.add(command)
    shared.SOURCE_STORAGE_OPTION.add(command)


def _floats(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers such as 8,8,40, got {text!r}") from None


def _scales(text: str) -> list[tuple[int, ...]]:
    try:
        return [tuple(int(v) for v in level.split(",")) for level in text.split(":")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected factors such as 1,1,1:2,2,1:4,4,2, got {text!r}"
        ) from None


def _sharding(text: str) -> Any:
    """``--sharding``: ``"auto"``, or its JSON object read."""
    if text == "auto":
        return text
    try:
        return json.loads(text)
    except ValueError as err:
        raise InvalidArgumentError(
            "--sharding", f"{text!r} is not JSON ({err})", "Pass auto or a JSON object"
        ) from None


def run(args: argparse.Namespace) -> int:
    """Run ``write-precomputed``: print the report; return the exit status."""
    import dask.array as da

    from shardpipe.precomputed.api import to_neuroglancer_precomputed
    from shardpipe.rechunking.source import open_source

    options = shared.storage_options(args.storage_option)
    source_options = shared.storage_options(args.source_storage_option, "--source-storage-option")
    if args.workers is not None:
        check_int("--workers", args.workers, example=4)
    sharding = _sharding(args.sharding)
    source = da.from_zarr(open_source(args.source, source_options).array)
    if args.zyx:
        source = source.transpose(2, 1, 0, *range(3, source.ndim))
    with compute_on(args.scheduler, args.workers):
        report = to_neuroglancer_precomputed(
            source,
            args.target,
            resolution=args.resolution,
            chunk_size=args.chunk_size,
            voxel_offset=args.voxel_offset,
            volume_type=args.volume_type,
            encoding=args.encoding,
            sharding=sharding,
            scales=args.scales,
            downsample=args.downsample,
            overwrite=args.overwrite,
            storage_options=options,
            max_mem=args.max_mem,
            progress=args.progress,
        )
    print(report)
    return 0
