"""``to_ome_zarr``: a Dask array (or DataArray) as a sharded OME-Zarr 0.5 image with a pyramid."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Unpack

import zarr

from shardpipe.core.checks import check_bool
from shardpipe.errors import InvalidArgumentError
from shardpipe.ome.options import OME_PARAMETERS, OmeZarrOptions, check_resume_of_image
from shardpipe.ome.prepare import prepare_ome_zarr
from shardpipe.ome.update import prepare_ome_update
from shardpipe.storage.resolve import resolve_store
from shardpipe.write.arguments import check_run, check_writable
from shardpipe.write.job import RunOptions, run_checked_job
from shardpipe.write.options import DEFAULT_ARRAY_OPTIONS, check_array_options
from shardpipe.write.parameters import shares_parameters

__all__ = ["to_ome_zarr"]


@shares_parameters(OME_PARAMETERS)
def to_ome_zarr(
    image: Any,
    store: Any,
    axes: Any = None,
    *,
    region: Any = None,
    append_dim: Any = None,
    write_strategy: str = "auto",
    progress: bool = False,
    commit: str | None = None,
    rebase: bool = False,
    **options: Unpack[OmeZarrOptions],
) -> zarr.Group | str:
    """Write ``image`` as an OME-Zarr 0.5 image group: a sharded pyramid, labels, metadata.

    Every level is computed from the level before inside one Dask
    computation that reads the source once (block means for images, the
    mode or the nearest voxel for labels); every shard of every level has
    exactly one writing task, whatever the source's chunking; every task's
    memory is projected and checked against ``max_mem`` before anything is
    written (:func:`~shardpipe.prepare_ome_zarr` gives the plan to look at
    first). With ``region`` or ``append_dim``, the image at the location is
    updated instead (every level), keeping its levels, layout and metadata.

    Parameters
    ----------
    region : tuple of slice, optional
        Write ``image`` into this box of level 0 of the existing image at
        the location; every lower level's voxels whose windows touch it are
        computed again (from level 0 read back) and written. See
        :mod:`shardpipe.ome.update`.
    append_dim : str or int, optional
        Append ``image`` to the existing image along this axis (``"t"``):
        every level grows by its downsampled share, computed in one pass.
    write_strategy : {"auto", "in_place", "append", "rewrite"}
        How updates change existing shards (see :func:`~shardpipe.to_sharded_zarr`).
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
    if region is None and append_dim is None:
        job = prepare_ome_zarr(image, store, axes, **options)
        report = run_checked_job(job, RunOptions(progress, *check_run(commit, rebase, job.target)))
        if report.snapshot_id is not None:
            return report.snapshot_id
        return zarr.open_group(job.target.zarr_store, path=job.target.path or None, mode="r")
    given = check_array_options({**options, "write_strategy": write_strategy})
    resume = check_resume_of_image(given)
    kept = ("path", "storage_options", "max_mem", "resume", "chunk_checksums")
    for parameter, value in options.items():
        if parameter in kept or value is None or (parameter, value) == ("compressors", "auto"):
            continue
        if (parameter, value) == ("overwrite", False):
            continue
        raise InvalidArgumentError(
            parameter,
            f"{value!r} given with {'region' if region is not None else 'append_dim'}: "
            "an update keeps the stored image's levels, layout and metadata",
            f"Leave {parameter} out (update a label image with path='labels/<name>')",
        )
    target = resolve_store(store, given.path, given.storage_options)
    check_writable(target)
    update = prepare_ome_update(
        image,
        target,
        axes=axes,
        region=region,
        append_dim=append_dim,
        options=replace(  # what the levels' writes take from this call, checked once above
            DEFAULT_ARRAY_OPTIONS,
            write_strategy=given.write_strategy,
            max_mem=given.max_mem,
            resume=resume,
        ),
    )
    done = run_checked_job(update, RunOptions(progress, *check_run(commit, rebase, target)))
    if done.snapshot_id is not None:
        return done.snapshot_id
    return zarr.open_group(target.zarr_store, path=target.path or None, mode="r")
