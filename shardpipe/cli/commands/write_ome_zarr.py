"""``shardpipe write-ome-zarr``: an array (Zarr or TIFF) as a sharded OME-Zarr 0.5 image.

SOURCE is a Zarr array (v2 or v3, local path or fsspec URL) or a TIFF file
(read lazily through tifffile's Zarr view, one Dask block per page or tile
run); label images are given as ``--labels NAME=SOURCE``.
"""

from __future__ import annotations

import argparse
from typing import Any

from shardpipe.cli import options as shared
from shardpipe.cli.compute import compute_on
from shardpipe.cli.failures import reported_as_task_failures
from shardpipe.cli.subcommand import Subcommands, add_subcommand
from shardpipe.core.checks import check_int
from shardpipe.errors import InvalidArgumentError

NAME = "write-ome-zarr"
SUMMARY = "write an array (Zarr or TIFF) as a sharded OME-Zarr 0.5 image with a pyramid"
DETAILS = (
    "Read SOURCE (a Zarr v2/v3 array, local path or fsspec URL, or a TIFF file) and write "
    "TARGET as an OME-Zarr 0.5 image group: every level of the pyramid computed in one pass "
    "over SOURCE, one task per shard, memory per task within --max-mem. With --append-dim, "
    "SOURCE is appended to the image at TARGET instead, every level growing."
)

TIFF_SUFFIXES = (".tif", ".tiff")
"""File names read as TIFF (``.ome.tif`` and ``.ome.tiff`` among them)."""


def add_command(commands: Subcommands) -> None:
    """Add ``write-ome-zarr`` to the commands of ``shardpipe``."""
    command = add_subcommand(commands, NAME, SUMMARY, DETAILS, run, reported_as_task_failures)
    command.add_argument("source", help="Zarr array (path or URL) or TIFF file to read")
    command.add_argument("target", help="directory or fsspec URL of the image group")
    command.add_argument(
        "--axes", default=None, help="axis names in order, e.g. zyx or tczyx (required to write)"
    )
    command.add_argument("--scale", type=_floats, default=None, help="voxel size per axis")
    command.add_argument("--translation", type=_floats, default=None, help="origin per axis")
    command.add_argument(
        "--units", type=_pairs, default=None, help="units, e.g. z=micrometer,y=micrometer"
    )
    command.add_argument(
        "--scale-factors",
        type=_factors,
        default=None,
        help="levels after the first, each a factor (2:4:8) or per axis (y=2,x=2:z=2,y=4,x=4)",
    )
    command.add_argument(
        "--method",
        default=None,
        choices=["mean", "mode", "nearest"],
        help="how a coarser level's pixel is made from finer ones (default: mean for images, "
        "mode for labels)",
    )
    shared.SHARD_SHAPE.add(command, "shard shape of level 0 per axis, e.g. 1,64,256,256")
    shared.CHUNK_SHAPE.add(command, "inner chunk shape of level 0 per axis")
    shared.COMPRESSOR.add(command)
    shared.NO_CHUNK_CHECKSUMS.add(command)
    command.add_argument("--name", default=None, help="the multiscale's name")
    command.add_argument(
        "--labels",
        action="append",
        default=[],
        metavar="NAME=SOURCE",
        help="a label image (Zarr array or TIFF) written under labels/NAME; repeatable",
    )
    shared.APPEND_DIM.add(command, "append SOURCE to the image at TARGET along this axis")
    shared.MAX_MEM.add(command)
    shared.OVERWRITE.add(command, "replace what is at TARGET")
    shared.RESUME.add(command)
    shared.add_progress(command)
    shared.add_compute(command)
    shared.STORAGE_OPTION.add(command)
    shared.SOURCE_STORAGE_OPTION.add(command)


def _floats(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected numbers such as 2,0.5,0.5, got {text!r}"
        ) from None


def _pairs(text: str) -> dict[str, str]:
    out = {}
    for item in text.split(","):
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise argparse.ArgumentTypeError(f"expected NAME=VALUE pairs, got {text!r}")
        out[name] = value
    return out


def _factors(text: str) -> list[Any]:
    levels: list[Any] = []
    try:
        for level in text.split(":"):
            if "=" in level:
                levels.append({k: int(v) for k, v in _pairs(level).items()})
            else:
                levels.append(int(level))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected factors such as 2:4:8 or y=2,x=2:z=2,y=4,x=4, got {text!r}"
        ) from None
    return levels


def open_array(source: str, options: dict[str, Any] | None) -> Any:
    """SOURCE as a Dask array: a Zarr array, or a TIFF file through tifffile's Zarr view."""
    import dask.array as da

    if source.lower().endswith(TIFF_SUFFIXES):
        try:
            import tifffile
        except ImportError:
            raise InvalidArgumentError(
                "source",
                f"{source!r} is a TIFF file and tifffile is not installed",
                "pip install tifffile",
            ) from None
        import zarr

        store = tifffile.imread(source, aszarr=True)
        node = zarr.open(store, mode="r")
        if isinstance(node, zarr.Group):  # a pyramidal TIFF: its full resolution
            node = node["0"]
        return da.from_zarr(node)
    from shardpipe.rechunking.source import open_source

    return da.from_zarr(open_source(source, options).array)


def _labels(items: list[str], options: dict[str, Any] | None) -> dict[str, Any]:
    labels = {}
    for item in items:
        name, sep, where = item.partition("=")
        if not sep or not name or not where:
            raise InvalidArgumentError(
                "--labels", f"{item!r} is not NAME=SOURCE", "Pass e.g. --labels cells=cells.zarr"
            )
        labels[name] = open_array(where, options)
    return labels


def run(args: argparse.Namespace) -> int:
    """Run ``write-ome-zarr``; return the exit status."""
    from shardpipe.ome.api import to_ome_zarr
    from shardpipe.ome.prepare import prepare_ome_zarr

    options = shared.storage_options(args.storage_option)
    source_options = shared.storage_options(args.source_storage_option, "--source-storage-option")
    updating = args.append_dim is not None
    if args.workers is not None:
        check_int("--workers", args.workers, example=4)
    if args.axes is None and not updating:
        raise InvalidArgumentError(
            "--axes", "is missing", "Name the axes in order, e.g. --axes zyx or --axes tczyx"
        )
    image = open_array(args.source, source_options)
    labels = _labels(args.labels, source_options)
    layout: dict[str, Any] = {}
    if not updating:  # an append keeps the stored image's layout and codecs
        layout = dict(
            compressors=args.compressor,
            chunk_checksums=not args.no_chunk_checksums,
            overwrite=args.overwrite,
        )
    given: dict[str, Any] = dict(
        scale=args.scale,
        translation=args.translation,
        axes_units=args.units,
        scale_factors=args.scale_factors,
        method=args.method,
        shards=args.shards,
        chunks=args.chunks,
        name=args.name,
        labels=labels or None,
        storage_options=options,
        max_mem=args.max_mem,
        resume=args.resume,
        **layout,
    )
    with compute_on(args.scheduler, args.workers):
        if updating:
            to_ome_zarr(
                image,
                args.target,
                args.axes,
                append_dim=args.append_dim,
                progress=args.progress,
                **given,
            )
            print(f"appended to the OME-Zarr image {args.target}")
        else:  # the plan first, as the other writers print it, then the report
            job = prepare_ome_zarr(image, args.target, args.axes, **given)
            print(job, flush=True)
            print(job.execute(progress=args.progress))
    return 0
