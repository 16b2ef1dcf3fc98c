"""The ``shardpipe write-ome-zarr`` command: an array as a sharded OME-Zarr 0.5 image.

SOURCE is a Zarr array (v2 or v3, local path or fsspec URL) or a TIFF file
(read lazily through tifffile's Zarr view, one Dask block per page or tile
run); labels are given as ``--labels NAME=SOURCE``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from shardpipe.cli.exit_statuses import EXPECTED, exit_status, fail
from shardpipe.cli.rechunk import add_compute_options
from shardpipe.errors import InvalidArgumentError

TIFF_SUFFIXES = (".tif", ".tiff", ".ome.tif", ".ome.tiff")


def add_command(
    commands: Any,
    ints: Callable[[str], tuple[int, ...]],
    parse_compressor: Callable[[str], Any],
    add_storage_option: Callable[[argparse.ArgumentParser], None],
) -> None:
    """Add ``write-ome-zarr`` to the subcommands of the parser."""
    command = commands.add_parser(
        "write-ome-zarr",
        help="write an array (Zarr or TIFF) as a sharded OME-Zarr 0.5 image with a pyramid",
        description="Read SOURCE (a Zarr v2/v3 array, local path or fsspec URL, or a TIFF file) "
        "and write TARGET as an OME-Zarr 0.5 image group: every level of the pyramid computed "
        "in one pass, one task per shard, memory per task within --max-mem.",
    )
    command.add_argument("source", help="Zarr array (path or URL) or TIFF file to read")
    command.add_argument("target", help="directory or fsspec URL of the image group")
    command.add_argument("--axes", required=True, help="axis names in order, e.g. zyx or tczyx")
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
    command.add_argument("--method", default=None, choices=["mean", "mode", "nearest"])
    command.add_argument("--shards", type=ints, default=None, help="shard shape per axis")
    command.add_argument("--chunks", type=ints, default=None, help="inner chunk shape per axis")
    command.add_argument(
        "--compressor",
        type=parse_compressor,
        default=None,
        help="zstd[:level], gzip[:level], blosc[:cname[:clevel]] or none (default zstd)",
    )
    command.add_argument("--name", default=None, help="the multiscale's name")
    command.add_argument(
        "--labels",
        action="append",
        default=[],
        metavar="NAME=SOURCE",
        help="a label image (Zarr array or TIFF) written under labels/NAME; repeatable",
    )
    command.add_argument("--append-dim", default=None, help="append SOURCE along this axis")
    command.add_argument("--max-mem", default="1GiB", help="memory budget per task (1GiB)")
    command.add_argument("--overwrite", action="store_true", help="replace what is at TARGET")
    command.add_argument("--resume", action="store_true", help="carry on an interrupted write")
    command.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_compute_options(command, add_storage_option)


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


def run(
    args: argparse.Namespace,
    options: dict[str, Any] | None,
    source_options: dict[str, Any] | None,
) -> int:
    """Run ``write-ome-zarr``; return the exit status."""
    from shardpipe.cli.rechunk import scheduler
    from shardpipe.ome.api import to_ome_zarr

    try:
        image = open_array(args.source, source_options)
        labels = {}
        for item in args.labels:
            name, sep, where = item.partition("=")
            if not sep or not name or not where:
                raise InvalidArgumentError(
                    "--labels",
                    f"{item!r} is not NAME=SOURCE",
                    "Pass e.g. --labels cells=cells.zarr",
                )
            labels[name] = open_array(where, source_options)
        updating = args.append_dim is not None
        with scheduler(args.scheduler, args.workers):
            to_ome_zarr(
                image,
                args.target,
                args.axes if not updating else None,
                scale=args.scale,
                translation=args.translation,
                axes_units=args.units,
                scale_factors=args.scale_factors,
                method=args.method,
                shards=args.shards,
                chunks=args.chunks,
                compressors="auto" if args.compressor is None else args.compressor,
                name=args.name,
                labels=labels or None,
                overwrite=args.overwrite,
                storage_options=options,
                max_mem=args.max_mem,
                resume=args.resume,
                append_dim=args.append_dim,
                progress=not args.no_progress,
            )
    except EXPECTED as err:
        if isinstance(err, InvalidArgumentError):
            return fail("write-ome-zarr", err)
        print(f"shardpipe write-ome-zarr: failed ({type(err).__name__}: {err})", file=sys.stderr)
        for note in getattr(err, "__notes__", ()):
            print(f"  {note.removeprefix('shardpipe: ')}", file=sys.stderr)
        return exit_status(err, during_work=True)
    print(f"wrote the OME-Zarr image {args.target}")
    return 0
