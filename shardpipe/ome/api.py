"""``to_ome_zarr``: a Dask array (or DataArray) as a sharded OME-Zarr 0.5 image with a pyramid."""

from __future__ import annotations

from typing import Any

import zarr

from shardpipe.core.checks import check_bool
from shardpipe.errors import InvalidArgumentError
from shardpipe.ome.prepare import prepare_ome_zarr
from shardpipe.ome.update import prepare_ome_update
from shardpipe.storage.resolve import resolve_store
from shardpipe.write.job import DEFAULT_MAX_MEM
from shardpipe.write.transaction import check_writable

__all__ = ["to_ome_zarr"]


def to_ome_zarr(
    image: Any,
    store: Any,
    axes: Any = None,
    *,
    scale: Any = None,
    translation: Any = None,
    axes_units: Any = None,
    scale_factors: Any = None,
    method: str | None = None,
    shards: Any = None,
    chunks: Any = None,
    compressors: Any = "auto",
    name: str | None = None,
    omero: Any = None,
    channel_names: Any = None,
    labels: Any = None,
    label_method: str | None = None,
    path: str | None = None,
    overwrite: bool = False,
    storage_options: dict[str, Any] | None = None,
    max_mem: int | str = DEFAULT_MAX_MEM,
    chunk_checksums: bool = True,
    resume: bool = False,
    region: Any = None,
    append_dim: Any = None,
    write_strategy: str = "auto",
    progress: bool = False,
    commit: str | None = None,
    rebase: bool = False,
) -> zarr.Group | str:
    """Write ``image`` as an OME-Zarr 0.5 image group: a sharded pyramid, labels, metadata.

    Every level is computed from the level before inside one Dask
    computation that reads the source once (block means for images, the
    mode or the nearest voxel for labels); every shard of every level has
    exactly one writing task, whatever the source's chunking; every task's
    memory is projected and checked against ``max_mem`` before anything is
    written (:func:`shardpipe.ome.prepare.prepare_ome_zarr` gives the plan to
    look at first).

    Parameters
    ----------
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
    scale, translation : sequence of float or dict, optional
        Physical voxel size and origin of level 0, per axis or by axis name
        (``{"z": 2.0, "y": 0.5, "x": 0.5}``). Default 1 and 0.
    axes_units : dict, optional
        Unit per axis name, one of the spec's (``"micrometer"``, ``"second"``).
    scale_factors : list of int or list of dict, optional
        The levels after level 0, each a cumulative factor relative to it
        and a multiple of the one before: ints apply to every space axis
        (``[2, 4, 8]``), dicts name axes (``[{"y": 2, "x": 2}, {"z": 2,
        "y": 4, "x": 4}]``: anisotropic). Default: halve the space axes
        whose voxels are within a factor two of the finest (so anisotropic
        volumes become isotropic first) until a level fits one shard.
    method : {"mean", "mode", "nearest"}, optional
        How the image's levels are made (default ``"mean"``).
    shards, chunks : sequence of int or dict, optional
        Shard and inner-chunk shape of level 0 (and of every level, clipped
        to it). Default: one time point and channel each; space axes of
        about 256 MiB shards and 1 MiB inner chunks.
    compressors
        Inner-chunk codecs, as in ``zarr.create_array``.
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
        channel axis).
    label_method : {"mode", "nearest"}, optional
        How label levels are made (default ``"mode"``).
    path : str, optional
        The image group's path inside ``store``.
    overwrite : bool
        Replace a group or array at the location (everything under it).
    storage_options : dict, optional
        fsspec options for URLs; ``{"fsync": bool}`` for local paths.
    max_mem : int or str
        Memory budget per task (default ``"1GiB"``).
    chunk_checksums : bool
        End the inner codec chain with ``crc32c`` (default True).
    resume : bool
        Carry on an interrupted write (or update) of the same image: shards
        already written (complete) are kept, the rest written.
    region : tuple of slice, optional
        Write ``image`` into this box of level 0 of the existing image at
        the location; every lower level's voxels whose windows touch it are
        computed again (from level 0 read back) and written. See
        :mod:`shardpipe.ome.update`.
    append_dim : str or int, optional
        Append ``image`` to the existing image along this axis (``"t"``):
        every level grows by its downsampled share, computed in one pass.
    write_strategy : {"auto", "in_place", "append", "rewrite"}
        How updates change existing shards (see ``to_sharded_zarr``).
    progress : bool
        Show a progress bar over every shard.
    commit : str, optional
        Into an Icechunk session: commit it with this message at the end.
    rebase : bool
        With ``commit``: rebase onto commits that reached the branch meanwhile.

    Returns
    -------
    zarr.Group or str
        The image group, opened for reading; with ``commit``, the snapshot id.

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        On bad arguments (naming the parameter), before anything is written.
    shardpipe.errors.MemoryBudgetError
        If a task of the plan cannot fit ``max_mem``.
    shardpipe.errors.ArrayExistsError
        If a node is at the location and ``overwrite`` is False.
    """
    progress = check_bool("progress", progress)
    if region is not None or append_dim is not None:
        given: dict[str, Any] = {
            "scale": scale,
            "translation": translation,
            "axes_units": axes_units,
            "scale_factors": scale_factors,
            "method": method,
            "shards": shards,
            "chunks": chunks,
            "name": name,
            "omero": omero,
            "channel_names": channel_names,
            "labels": labels,
            "label_method": label_method,
        }
        for parameter, value in [
            *given.items(),
            ("compressors", None if compressors == "auto" else compressors),
            ("overwrite", overwrite or None),
        ]:
            if value is not None:
                raise InvalidArgumentError(
                    parameter,
                    f"{value!r} given with {'region' if region is not None else 'append_dim'}: "
                    "an update keeps the stored image's levels, layout and metadata",
                    f"Leave {parameter} out (update a label image with path='labels/<name>')",
                )
        target = resolve_store(store, path, storage_options)
        check_writable(target)
        update = prepare_ome_update(
            image,
            target,
            axes=axes,
            region=region,
            append_dim=append_dim,
            write_strategy=write_strategy,
            max_mem=max_mem,
            resume=resume,
        )
        done = update.execute(progress=progress, commit=commit, rebase=rebase)
        if done.snapshot_id is not None:
            return done.snapshot_id
        return zarr.open_group(target.zarr_store, path=target.path or None, mode="r")
    job = prepare_ome_zarr(
        image,
        store,
        axes,
        scale=scale,
        translation=translation,
        axes_units=axes_units,
        scale_factors=scale_factors,
        method=method,
        shards=shards,
        chunks=chunks,
        compressors=compressors,
        name=name,
        omero=omero,
        channel_names=channel_names,
        labels=labels,
        label_method=label_method,
        path=path,
        overwrite=overwrite,
        storage_options=storage_options,
        max_mem=max_mem,
        chunk_checksums=chunk_checksums,
        resume=resume,
    )
    report = job.execute(progress=progress, commit=commit, rebase=rebase)
    if report.snapshot_id is not None:
        return report.snapshot_id
    target = job.target
    return zarr.open_group(target.zarr_store, path=target.path or None, mode="r")
