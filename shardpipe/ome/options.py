"""The options of the OME-Zarr front doors, defined once: types, defaults, documentation.

:func:`~shardpipe.prepare_ome_zarr` and :func:`~shardpipe.to_ome_zarr`
take :class:`OmeZarrOptions` (``to_ome_zarr`` also the updates:
``region``, ``append_dim``, ``write_strategy``).
The options they share with every array writer (``path``, ``overwrite``,
``storage_options``, ``resume``, ``shards``, ``chunks``, ``compressors``,
``chunk_checksums``, ``max_mem``...) are those of
:mod:`shardpipe.write.options`, typed and checked there
(:func:`~shardpipe.write.options.check_array_options`); where they mean
something more for an image (``shards`` of level 0, ``region`` of level 0),
:data:`OME_PARAMETERS` words them for it.
"""

from __future__ import annotations

from typing import Any

from shardpipe.errors import InvalidArgumentError
from shardpipe.write.options import (
    ARRAY_PARAMETERS,
    SOURCE_PARAMETERS,
    ArrayOptions,
    TargetOptions,
)
from shardpipe.write.parameters import SharedParameters


class OmeZarrOptions(TargetOptions, total=False):
    """Every option of :func:`~shardpipe.prepare_ome_zarr` and :func:`~shardpipe.to_ome_zarr`."""

    scale: Any
    translation: Any
    axes_units: Any
    scale_factors: Any
    method: str | None
    shards: Any
    chunks: Any
    compressors: Any
    name: str | None
    omero: Any
    channel_names: Any
    labels: Any
    label_method: str | None
    max_mem: int | str
    chunk_checksums: bool


_OWN = SharedParameters(
    """
    image : dask.array.Array, numpy.ndarray or xarray.DataArray
        2 to 5 dimensions, any integer or float dtype, any Dask chunking. A
        ``DataArray``'s dims name the axes and its evenly spaced coordinates
        give ``scale`` and ``translation`` (their ``units`` attribute the
        units).
    store : str, os.PathLike, zarr Store, zarr Group or icechunk.Session
        Where the image group goes: a local path, an fsspec URL
        (``"s3://bucket/image.ome.zarr"``), a store, a group (with ``path``)
        or a writable Icechunk session.
    axes : str or list
        ``"zyx"``, ``"tczyx"``..., a list of names, or the spec's axis
        objects (``{"name": "z", "type": "space", "unit": "micrometer"}``),
        in the spec's order: time, channel, then 2 or 3 space axes. Default:
        the DataArray's dims, else ``yx``, ``zyx`` or ``tczyx`` by rank.
    scale : sequence of float or dict, optional
        Physical voxel size of level 0, per axis or by axis name
        (``{"z": 2.0, "y": 0.5, "x": 0.5}``). Default 1.
    translation : sequence of float or dict, optional
        Physical origin of level 0, per axis or by axis name. Default 0.
    axes_units : dict, optional
        Unit per axis name, one of the spec's (``"micrometer"``, ``"second"``).
    scale_factors : list of int or list of dict, optional
        The levels after level 0, each a cumulative factor relative to it
        and a multiple of the one before: ints apply to every space axis
        (``[2, 4, 8]``), dicts name axes (``[{"y": 2, "x": 2}, {"z": 2,
        "y": 4, "x": 4}]``: anisotropic). Default: halve the space axes
        whose voxels are within a factor two of the finest (so anisotropic
        volumes become isotropic first) while they are longer than an
        inner chunk, until a level fits one inner chunk.
        Bounded: at most 63 levels after level 0, and along each axis a
        level's step from the one before no larger than that level is (a
        factor below twice the axis's length; none once an axis is one
        voxel).
    method : {"mean", "mode", "nearest"}, optional
        How the image's levels are made (default ``"mean"``).
    shards : sequence of int or dict, optional
        Shard shape of level 0 (and of every level, clipped to it), per axis
        or by axis name. Default: one time point and channel each; space
        axes of about 256 MiB shards.
    chunks : sequence of int or dict, optional
        Inner-chunk shape, as ``shards``; must divide it. Default: about 1 MiB.
    name : str, optional
        The multiscale's ``name``.
    omero : dict, optional
        The spec's ``omero`` object (channel colours, windows).
    channel_names : list of str, optional
        Instead of ``omero``: one label per channel.
    labels : dict, optional
        Label images written under ``labels/<name>`` with their own pyramid
        (the image's factors): ``{"cells": array}`` or ``{"cells": {"data":
        array, "colors": {1: [255, 0, 0, 255]}, "properties": {1: {"class":
        "nucleus"}}}}``. Integer arrays of the image's shape (or without its
        channel axis). Each name is one Zarr group name: not empty, without
        ``/``, not starting with ``.`` or ``__``, not ``zarr.json``.
    label_method : {"mode", "nearest"}, optional
        How label levels are made (default ``"mode"``).
    path : str, optional
        The image group's path inside ``store``.
    overwrite : bool
        Replace a group or array at the location (everything under it).
    resume : bool
        Carry on an interrupted write (or update) of the same image: shards
        already written (complete) are kept, the rest written.
    progress : bool
        Show a progress bar over every shard.
    """,
    {
        "scale": None,
        "translation": None,
        "axes_units": None,
        "scale_factors": None,
        "method": None,
        "name": None,
        "omero": None,
        "channel_names": None,
        "labels": None,
        "label_method": None,
        "resume": False,
    },
)

OME_PARAMETERS = _OWN | (ARRAY_PARAMETERS | _OWN)
"""The entries and defaults of the parameters of :func:`~shardpipe.to_ome_zarr` and its plan:
the image's own first, then the array options (worded for an image where they differ)."""

CONVERSION_PARAMETERS = (
    OME_PARAMETERS
    | SOURCE_PARAMETERS
    | SharedParameters(
        """
    source : str, os.PathLike or zarr Store
        The 0.4 image group (Zarr v2), with its labels if it has any.
    target : str, os.PathLike, zarr Store or icechunk.Session
        Where the 0.5 image group goes.
    path : str, optional
        Group path of the image inside ``target``.
    shards : sequence of int or dict, optional
        Shard shape of every level (clipped to it), a whole number of the
        source's chunks along every axis, per axis of the image (label
        images take the sizes of the axes they have). Default: one chunk along time and
        channel axes, about 256 MiB along the space axes.
    chunk_checksums : bool
        End every inner chunk with a CRC32C (computed over the chunk's bytes,
        which are not decoded).
    reencode : bool
        Decode and encode every level with shardpipe's defaults instead of
        copying the chunks.
    progress : bool
        Show progress bars (on Dask's local schedulers: one over the
        shards whose chunks are copied, one over the levels written again).
    """,
        {"reencode": False},
    )
)
"""The entries and defaults of the parameters of :func:`~shardpipe.convert_ome_zarr`, its plan
and its ``execute``."""


def check_resume_of_image(given: ArrayOptions) -> bool:
    """``resume`` of an OME-Zarr write: True or False (the group's record is always compared)."""
    if given.resume == "force":
        raise InvalidArgumentError(
            "resume",
            "'force', but an OME-Zarr write always compares its group's record",
            "Pass resume=True",
        )
    return bool(given.resume)
