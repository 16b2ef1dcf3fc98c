"""Validate and plan an OME-Zarr write into an :class:`~shardpipe.ome.job.OmeZarrWrite`.

Every argument is checked and every level of every pyramid planned (its
Dask array built, its shards planned and their memory checked) before
anything is written; a task that cannot fit ``max_mem`` refuses the plan.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import dask.array as da
import numpy as np

from shardpipe.core.checks import check_bool
from shardpipe.core.grid import Shape
from shardpipe.core.pyramid import (
    PyramidLevel,
    auto_factors,
    downsample_blocks,
    downsample_nbytes,
    plan_levels,
)
from shardpipe.engine.pyramid import downsampled
from shardpipe.errors import InvalidArgumentError, MemoryBudgetError
from shardpipe.ome.arguments import (
    ImageInput,
    LabelInput,
    check_image,
    check_labels,
    check_method,
    default_layout,
    layout_param,
    scale_factors_param,
)
from shardpipe.ome.axes import Axis
from shardpipe.ome.job import OmeZarrWrite
from shardpipe.ome.metadata import image_attributes, label_attributes, multiscale, omero_document
from shardpipe.ome.multiscale import MultiscaleWrite
from shardpipe.ome.run import read_group_record
from shardpipe.storage.resolve import ResolvedStore, resolve_store
from shardpipe.stored.places import check_not_a_file, check_target
from shardpipe.write.arguments import check_max_mem
from shardpipe.write.job import DEFAULT_MAX_MEM, ShardedWrite
from shardpipe.write.prepare import prepare_write
from shardpipe.write.transaction import check_writable

__all__ = ["plan_multiscale", "prepare_ome_zarr", "pyramid_arrays"]


def _version() -> str:
    try:
        return version("shardpipe")
    except PackageNotFoundError:  # pragma: no cover - a source tree
        return "0.1.0"


def pyramid_arrays(
    data: da.Array, steps: Sequence[Shape], method: str, *, budget: int, what: str
) -> tuple[list[da.Array], list[int]]:
    """Each level's Dask array, from ``data`` by ``steps``, and its downsampling task's memory.

    ``steps`` are the levels' steps from the level before (level 0's ones
    first). Blocks are regrouped before each step as
    :func:`~shardpipe.core.pyramid.downsample_blocks` chooses.

    Raises
    ------
    shardpipe.errors.MemoryBudgetError
        When a downsampling (or regrouping) task cannot fit ``budget``.
    """
    dtype = np.dtype(data.dtype)
    target_nbytes = max(math.prod(max(c) for c in data.chunks) * dtype.itemsize, 1 << 20)
    arrays = [data]
    memory = [0]
    for index, step in enumerate(steps[1:], start=1):
        before = arrays[-1]
        task = f"downsample-{method} (level {index} of {what})"
        blocks = downsample_blocks(
            before.chunks,
            step,
            dtype,
            method,
            target_nbytes=target_nbytes,
            budget=budget,
            what=task,
        )
        largest = tuple(max(b) for b in blocks)
        projected = downsample_nbytes(largest, step, dtype, method)
        if tuple(map(tuple, blocks)) != tuple(before.chunks):
            regroup = 2 * math.prod(largest) * dtype.itemsize  # pieces and the joined block
            if regroup > budget:
                raise MemoryBudgetError(
                    f"rechunk (level {index} of {what})",
                    regroup,
                    budget,
                    "raise max_mem, or pass the image in smaller Dask blocks",
                )
            projected = max(projected, regroup)
        memory.append(projected)
        arrays.append(downsampled(before, step, method, blocks))
    return arrays, memory


def plan_multiscale(
    data: da.Array,
    target: ResolvedStore,
    path: str,
    axes: tuple[Axis, ...],
    levels: list[PyramidLevel],
    method: str,
    *,
    budget: int,
    write_kwargs: dict[str, Any],
) -> tuple[list[ShardedWrite], list[int]]:
    """Each level's planned write of a new pyramid, and its downsampling task's memory.

    Raises
    ------
    shardpipe.errors.MemoryBudgetError
        When a downsampling task or a level's write cannot fit ``budget``.
    """
    arrays, memory = pyramid_arrays(
        data, [level.step for level in levels], method, budget=budget, what=path or "image"
    )
    jobs = []
    shared = len(levels) > 1
    for level, array in zip(levels, arrays, strict=True):
        job = prepare_write(
            array,
            target,
            path="/".join(p for p in (path, str(level.index)) if p),
            shards=level.shard_shape,
            chunks=level.chunk_shape,
            dimension_names=[a.name for a in axes],
            max_mem=budget,
            **write_kwargs,
        )
        job.shared_source = shared
        jobs.append(job)
    return jobs, memory


def _label_axes(image: ImageInput, label: LabelInput) -> tuple[tuple[Axis, ...], list[int]]:
    """The label image's axes and which of the image's axes they are."""
    if label.data.ndim == image.data.ndim:
        return image.axes, list(range(len(image.axes)))
    kept = [d for d, a in enumerate(image.axes) if a.type != "channel"]
    return tuple(image.axes[d] for d in kept), kept


def _pick(values: Sequence[Any], dims: Sequence[int]) -> tuple[Any, ...]:
    return tuple(values[d] for d in dims)


def prepare_ome_zarr(
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
) -> OmeZarrWrite:
    """Validate and plan an OME-Zarr write; write nothing.

    Parameters are those of :func:`~shardpipe.to_ome_zarr` without
    ``progress``, ``commit`` and ``rebase``, which belong to running it.

    Returns
    -------
    OmeZarrWrite
        ``print`` it to see the plan; ``execute()`` runs it.
    """
    overwrite = check_bool("overwrite", overwrite)
    resume = check_bool("resume", resume)
    if resume and overwrite:
        raise InvalidArgumentError(
            "resume", "True together with overwrite=True", "Pass one of them"
        )
    if name is not None and not isinstance(name, str):
        raise InvalidArgumentError("name", f"{name!r} is not a string", "Pass a name or None")
    picture = check_image(image, axes, scale, translation, axes_units)
    budget = check_max_mem(max_mem)
    method = check_method(method, labels=False)
    label_method = check_method(label_method, labels=True, parameter="label_method")
    label_inputs = check_labels(labels, picture)
    n_channels = next(
        (n for n, a in zip(picture.data.shape, picture.axes, strict=True) if a.type == "channel"),
        1,
    )
    omero_doc = omero_document(omero, channel_names, n_channels)
    shape: Shape = tuple(int(n) for n in picture.data.shape)
    itemsize = np.dtype(picture.data.dtype).itemsize
    shard_shape, chunk_shape = default_layout(
        shape,
        picture.axes,
        itemsize,
        layout_param("shards", shards, picture.axes),
        layout_param("chunks", chunks, picture.axes),
    )
    factors = scale_factors_param(scale_factors, picture.axes)
    if factors is None:
        factors = auto_factors(
            shape, [a.is_space for a in picture.axes], picture.scale, shard_shape
        )
    levels = plan_levels(
        shape, factors, [shard_shape] * (len(factors) + 1), [chunk_shape] * (len(factors) + 1)
    )
    target = resolve_store(store, path, storage_options)
    check_not_a_file(target, "store")
    check_writable(target)
    if resume and target.transactional:
        raise InvalidArgumentError(
            "resume",
            "True, but an Icechunk write that did not finish left nothing to resume",
            "Write again in a writable session, without resume",
        )
    record = read_group_record(target) if resume else None
    if not resume or record is None:
        check_target(target, overwrite)
    write_kwargs: dict[str, Any] = dict(
        compressors=compressors,
        overwrite=overwrite,
        chunk_checksums=chunk_checksums,
        resume=resume,
    )
    version_ = _version()
    image_jobs, image_memory = plan_multiscale(
        picture.data,
        target,
        "",
        picture.axes,
        levels,
        method,
        budget=budget,
        write_kwargs=write_kwargs,
    )
    paths = [str(level.index) for level in levels]
    all_factors = [level.factor for level in levels]
    image_document = multiscale(
        name,
        picture.axes,
        paths,
        all_factors,
        picture.scale,
        picture.translation,
        method,
        version_,
    )
    image_write = MultiscaleWrite(
        "",
        picture.axes,
        levels,
        method,
        image_jobs,
        image_memory,
        image_attributes(image_document, omero_doc),
    )
    label_writes = []
    for label in label_inputs:
        label_axes, dims = _label_axes(picture, label)
        label_levels = plan_levels(
            _pick(shape, dims),
            [_pick(f, dims) for f in factors],
            [_pick(shard_shape, dims)] * len(levels),
            [_pick(chunk_shape, dims)] * len(levels),
        )
        group = f"labels/{label.name}"
        jobs, memory = plan_multiscale(
            label.data,
            target,
            group,
            label_axes,
            label_levels,
            label_method,
            budget=budget,
            write_kwargs=write_kwargs,
        )
        document = multiscale(
            label.name,
            label_axes,
            paths,
            [level.factor for level in label_levels],
            _pick(picture.scale, dims),
            _pick(picture.translation, dims),
            label_method,
            version_,
        )
        label_writes.append(
            MultiscaleWrite(
                group,
                label_axes,
                label_levels,
                label_method,
                jobs,
                memory,
                label_attributes(document, label.colors, label.properties),
            )
        )
    identity = {
        "sources": [j.source.name for j in image_jobs[:1]]
        + [m.jobs[0].source.name for m in label_writes],
        "image": image_write.attributes,
        "labels": {m.path: m.attributes for m in label_writes},
    }
    if resume and record is not None and record.get("identity") != identity:
        raise InvalidArgumentError(
            "resume",
            f"the unfinished write recorded at {target.key('.shardpipe/ome-write.json')} wrote "
            "another image or other metadata",
            "Pass the same image and arguments as the write that was interrupted, or write "
            "anew with overwrite=True",
        )
    return OmeZarrWrite(
        target,
        image_write,
        label_writes,
        [label.name for label in label_inputs],
        overwrite,
        identity,
        resume,
        budget,
    )
