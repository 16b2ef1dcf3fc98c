"""Validate and plan an OME-Zarr write into an :class:`~shardpipe.ome.job.OmeZarrWrite`.

Every argument is checked and every level of every pyramid planned (its
Dask array built, its shards planned and their memory checked) before
anything is written; a task that cannot fit ``max_mem`` refuses the plan.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Unpack

import dask.array as da
import numpy as np

from shardpipe import advice
from shardpipe._version import __version__
from shardpipe.core.downsample_region import straddles
from shardpipe.core.grid import Shape
from shardpipe.core.pyramid import (
    PyramidLevel,
    auto_factors,
    downsample_blocks,
    plan_levels,
    region_nbytes,
)
from shardpipe.engine.pyramid import downsampled
from shardpipe.errors import ArrayExistsError, InvalidArgumentError
from shardpipe.internals.zarr_core import ArrayV3Metadata
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
from shardpipe.ome.finished import check_finished_write, finished_image_there
from shardpipe.ome.group_checks import label_names
from shardpipe.ome.job import OmeZarrWrite
from shardpipe.ome.level_blocks import PyramidHold, check_level_holds, level_holds
from shardpipe.ome.metadata import image_attributes, label_attributes, multiscale, omero_document
from shardpipe.ome.multiscale import MultiscaleWrite
from shardpipe.ome.options import OME_PARAMETERS, OmeZarrOptions, check_resume_of_image
from shardpipe.ome.run import GROUP_RECORD, read_group_record
from shardpipe.ome.stored import read_image
from shardpipe.storage.resolve import ResolvedStore, resolve_store
from shardpipe.stored.metadata import layout_of, read_node_metadata
from shardpipe.stored.places import check_not_a_file, check_target
from shardpipe.write.arguments import check_writable
from shardpipe.write.job import ShardedWrite
from shardpipe.write.options import DEFAULT_ARRAY_OPTIONS, ArrayOptions, check_array_options
from shardpipe.write.parameters import shares_parameters
from shardpipe.write.prepare import prepare_checked

__all__ = ["plan_multiscale", "prepare_ome_zarr", "pyramid_arrays"]


def pyramid_arrays(
    data: da.Array,
    steps: Sequence[Shape],
    method: str,
    *,
    budget: int,
    what: str,
    regions: Sequence[Shape] | None = None,
) -> tuple[list[da.Array], list[int]]:
    """Each level's Dask array, from ``data`` by ``steps``, and its downsampling task's memory.

    ``steps`` are the levels' steps from the level before (level 0's ones
    first). Each level is computed region by region of the level before
    (:mod:`shardpipe.engine.pyramid`). ``regions`` gives, per level before
    the last, the region shape wished for: its shards, so that each level
    0 shard's region makes one block of level 1, aligned with level 1's
    shards (none, or one that is not whole windows of the step: regions
    near the level's blocks). :func:`~shardpipe.core.pyramid.downsample_blocks`
    aligns them and keeps their tasks within ``budget``.

    Raises
    ------
    shardpipe.errors.MemoryBudgetError
        When a downsampling task cannot fit ``budget``.
    """
    dtype = np.dtype(data.dtype)
    target_nbytes = max(math.prod(max(c) for c in data.chunks) * dtype.itemsize, 1 << 20)
    arrays = [data]
    memory = [0]
    for index, step in enumerate(steps[1:], start=1):
        before = arrays[-1]
        wished: Sequence[Sequence[int]] = before.chunks
        grow = target_nbytes
        region = regions[index - 1] if regions is not None else None
        if region is not None and all(r % s == 0 for r, s in zip(region, step, strict=True)):
            wished = tuple(_regular(n, r) for n, r in zip(before.shape, region, strict=True))
            grow = 0
        joined = straddles(before.chunks, step)
        blocks = downsample_blocks(
            wished,
            step,
            dtype,
            method,
            target_nbytes=grow,
            budget=budget,
            joined=joined,
            what=f"downsample-{method} (level {index} of {what})",
        )
        largest = tuple(max(b) for b in blocks)
        memory.append(region_nbytes(largest, step, dtype, method, joined=joined))
        arrays.append(downsampled(before, step, method, blocks))
    return arrays, memory


def _regular(total: int, size: int) -> tuple[int, ...]:
    """``total`` cut into blocks of ``size`` (the last one shorter)."""
    return (size,) * (total // size) + ((total % size,) if total % size else ())


def plan_multiscale(
    data: da.Array,
    target: ResolvedStore,
    path: str,
    axes: tuple[Axis, ...],
    levels: list[PyramidLevel],
    method: str,
    *,
    write_options: ArrayOptions,
) -> tuple[list[ShardedWrite], list[int], PyramidHold]:
    """Each level's planned write of a new pyramid, its downsampling task's memory, what it holds.

    The last: what the levels' blocks hold between tasks
    (:mod:`shardpipe.ome.level_blocks`), checked by the caller with the
    other pyramids written in the same computation.

    Raises
    ------
    shardpipe.errors.MemoryBudgetError
        When a downsampling task or a level's write cannot fit
        ``write_options.max_mem``.
    """
    steps = [level.step for level in levels]
    arrays, memory = pyramid_arrays(
        data,
        steps,
        method,
        budget=write_options.max_mem,
        what=path or "image",
        regions=[level.shard_shape for level in levels[:-1]],
    )
    jobs = []
    shared = len(levels) > 1
    for level, array in zip(levels, arrays, strict=True):
        job = prepare_checked(  # the options were checked once, for every level
            array,
            target,
            replace(
                write_options,
                path="/".join(p for p in (path, str(level.index)) if p),
                shards=level.shard_shape,
                chunks=level.chunk_shape,
                dimension_names=[a.name for a in axes],
            ),
        )
        jobs.append(replace(job, shared_source=shared))
    hold = level_holds(path or "image", arrays, jobs, steps)
    return jobs, memory, hold


@dataclass(frozen=True)
class ImageFrame:
    """The geometry every pyramid of a write shares: the image's, new or stored.

    Parameters
    ----------
    axes : tuple of Axis
        The image's axes.
    shape : tuple of int
        Level 0's shape.
    scale, translation : tuple of float
        Level 0's voxel size and origin.
    factors : list of tuple of int
        The levels' factors after level 0.
    shard_shape, chunk_shape : tuple of int
        Level 0's shards and inner chunks (clipped per level).
    """

    axes: tuple[Axis, ...]
    shape: Shape
    scale: tuple[float, ...]
    translation: tuple[float, ...]
    factors: list[Shape]
    shard_shape: Shape
    chunk_shape: Shape

    @property
    def paths(self) -> list[str]:
        """The level arrays' paths."""
        return [str(k) for k in range(len(self.factors) + 1)]

    def levels(self, dims: Sequence[int]) -> list[PyramidLevel]:
        """The levels of a pyramid over the axes ``dims`` of the image."""
        n = len(self.factors) + 1
        return plan_levels(
            _pick(self.shape, dims),
            [_pick(f, dims) for f in self.factors],
            [_pick(self.shard_shape, dims)] * n,
            [_pick(self.chunk_shape, dims)] * n,
        )


def _pick(values: Sequence[Any], dims: Sequence[int]) -> tuple[Any, ...]:
    return tuple(values[d] for d in dims)


def _label_dims(frame: ImageFrame, label: LabelInput) -> list[int]:
    """Which of the image's axes the label image has (all, or all but the channel axis)."""
    if label.data.ndim == len(frame.axes):
        return list(range(len(frame.axes)))
    return [d for d, a in enumerate(frame.axes) if a.type != "channel"]


def _stored_frame(target: ResolvedStore, shards: Any, chunks: Any) -> ImageFrame:
    """The frame of the image stored at ``target`` (labels are added to it)."""
    stored = read_image(target, "store")
    problems = stored.consistency_problems()
    if problems:
        raise InvalidArgumentError(
            "store",
            f"the image's levels do not form a pyramid ({'; '.join(problems)})",
            "Run `shardpipe repair` on the group, or rewrite the image",
        )
    axes = stored.multiscale.axes
    metadata = read_node_metadata(
        target.shards, target.key(f"{stored.multiscale.paths[0]}/zarr.json")
    )
    assert isinstance(metadata, ArrayV3Metadata)  # read_image checked it
    layout = layout_of(metadata)
    given_shards = layout_param("shards", shards, axes)
    given_chunks = layout_param("chunks", chunks, axes)
    shard_shape, chunk_shape = default_layout(
        stored.shapes[0],
        axes,
        1,
        given_shards or layout.shard_shape,
        given_chunks or (layout.chunk_shape if given_shards is None else None),
    )
    scale = stored.multiscale.scales[0]
    return ImageFrame(
        axes,
        stored.shapes[0],
        scale,
        stored.multiscale.translations[0],
        stored.factors[1:],
        shard_shape,
        chunk_shape,
    )


@shares_parameters(OME_PARAMETERS)
def prepare_ome_zarr(
    image: Any, store: Any, axes: Any = None, **options: Unpack[OmeZarrOptions]
) -> OmeZarrWrite:
    """Validate and plan an OME-Zarr write; write nothing.

    Parameters are those of :func:`~shardpipe.to_ome_zarr` without
    ``progress``, ``commit`` and ``rebase``, which belong to running it, and
    without the updates (``region``, ``append_dim``). With ``image=None``,
    ``labels`` are added to the image already at the location (their
    pyramids take its levels; ``overwrite`` then replaces label images of
    the same names only).

    Parameters
    ----------

    Returns
    -------
    OmeZarrWrite
        ``print`` it to see the plan; ``execute()`` runs it.

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        On bad arguments (naming the parameter), before anything is written.
    shardpipe.errors.MemoryBudgetError
        If a task of the plan cannot fit ``max_mem``.
    shardpipe.errors.ArrayExistsError
        If a node is at the location and ``overwrite`` is False.
    """
    checked = check_array_options(options)  # the options every array writer checks alike
    resume = check_resume_of_image(checked)
    overwrite, budget, chunk_checksums = checked.overwrite, checked.max_mem, checked.chunk_checksums
    shards, chunks, compressors = checked.shards, checked.chunks, checked.compressors
    scale, translation = options.get("scale"), options.get("translation")
    axes_units, scale_factors = options.get("axes_units"), options.get("scale_factors")
    method, label_method = options.get("method"), options.get("label_method")
    name, labels = options.get("name"), options.get("labels")
    omero, channel_names = options.get("omero"), options.get("channel_names")
    if name is not None and not isinstance(name, str):
        raise InvalidArgumentError("name", f"{name!r} is not a string", "Pass a name or None")
    method = check_method(method, labels=False)
    label_method = check_method(label_method, labels=True, parameter="label_method")
    target = resolve_store(store, checked.path, checked.storage_options)
    check_not_a_file(target, "store")
    check_writable(target)
    if resume and target.transactional:
        raise InvalidArgumentError(
            "resume",
            "True, but an Icechunk write that did not finish left nothing to resume",
            "Write again in a writable session, without resume",
        )
    picture: ImageInput | None = None
    if image is None:
        if labels is None:
            raise InvalidArgumentError(
                "image", "None without labels", "Pass an image, or labels to add to the image"
            )
        given = {
            "axes": axes,
            "scale": scale,
            "translation": translation,
            "axes_units": axes_units,
            "scale_factors": scale_factors,
            "method": method if method != "mean" else None,
            "omero": omero,
            "channel_names": channel_names,
            "name": name,
        }
        for parameter, value in given.items():
            if value is not None:
                raise InvalidArgumentError(
                    parameter,
                    f"{value!r} given to add labels to a stored image, whose own it takes",
                    f"Leave {parameter} out",
                )
        frame = _stored_frame(target, shards, chunks)
        existing = label_names(target)
    else:
        picture = check_image(image, axes, scale, translation, axes_units)
        shape: Shape = tuple(int(n) for n in picture.data.shape)
        shard_shape, chunk_shape = default_layout(
            shape,
            picture.axes,
            np.dtype(picture.data.dtype).itemsize,
            layout_param("shards", shards, picture.axes),
            layout_param("chunks", chunks, picture.axes),
        )
        factors = scale_factors_param(scale_factors, picture.axes, shape)
        if factors is None:
            factors = auto_factors(
                shape, [a.is_space for a in picture.axes], picture.scale, chunk_shape
            )
        frame = ImageFrame(
            picture.axes,
            shape,
            picture.scale,
            picture.translation,
            factors,
            shard_shape,
            chunk_shape,
        )
        existing = []
    label_inputs = check_labels(labels, frame.shape, frame.axes)
    record = read_group_record(target) if resume else None
    remove: list[str] = []
    if picture is not None:
        finished = finished_image_there(target, resume, record)  # checked once planned
        if not resume or (record is None and not finished):
            check_target(target, overwrite)
        remove = [""] if overwrite else []
    else:
        clash = [n.name for n in label_inputs if n.name in existing]
        finished = bool(clash) and finished_image_there(target, resume, record)
        if clash and not overwrite and not (resume and record is not None) and not finished:
            raise ArrayExistsError(
                f"labels: the image at {target.path or 'the store root'!r} has label images "
                f"named {clash} already; pass {advice.setting('overwrite')} to replace them"
            )
        remove = [f"labels/{n}" for n in clash] if overwrite else []
    write_options = replace(  # each level's write plans with these, checked above
        DEFAULT_ARRAY_OPTIONS,
        compressors=compressors,
        overwrite=overwrite,
        chunk_checksums=chunk_checksums,
        resume=resume,
        max_mem=budget,
    )
    version_ = __version__
    image_write = None
    if picture is not None:
        n_channels = next(
            (n for n, a in zip(frame.shape, frame.axes, strict=True) if a.type == "channel"), 1
        )
        omero_doc = omero_document(omero, channel_names, n_channels)
        levels = frame.levels(range(len(frame.axes)))
        jobs, memory, hold = plan_multiscale(
            picture.data,
            target,
            "",
            frame.axes,
            levels,
            method,
            write_options=write_options,
        )
        document = multiscale(
            name,
            frame.axes,
            frame.paths,
            [level.factor for level in levels],
            frame.scale,
            frame.translation,
            method,
            version_,
        )
        image_write = MultiscaleWrite(
            "",
            frame.axes,
            levels,
            method,
            jobs,
            memory,
            image_attributes(document, omero_doc),
            hold,
        )
    label_writes = []
    for label in label_inputs:
        dims = _label_dims(frame, label)
        label_axes = _pick(frame.axes, dims)
        label_levels = frame.levels(dims)
        group = f"labels/{label.name}"
        jobs, memory, hold = plan_multiscale(
            label.data,
            target,
            group,
            label_axes,
            label_levels,
            label_method,
            write_options=write_options,
        )
        document = multiscale(
            label.name,
            label_axes,
            frame.paths,
            [level.factor for level in label_levels],
            _pick(frame.scale, dims),
            _pick(frame.translation, dims),
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
                hold,
            )
        )
    sources = [m.jobs[0].source.name for m in ([image_write] if image_write else [])]
    identity = {
        "sources": sources + [m.jobs[0].source.name for m in label_writes],
        "image": image_write.attributes if image_write is not None else None,
        "labels": {m.path: m.attributes for m in label_writes},
    }
    if resume and record is not None and record.get("identity") != identity:
        raise InvalidArgumentError(
            "resume",
            f"the unfinished write recorded at {target.key(GROUP_RECORD)} wrote another image "
            "or other metadata",
            "Pass the same image and arguments as the write that was interrupted, or write "
            f"anew with {advice.setting('overwrite')}",
        )
    pyramids = [*([image_write] if image_write is not None else []), *label_writes]
    check_level_holds([m.hold for m in pyramids if m.hold is not None], budget)  # one computation
    names = existing + [n.name for n in label_inputs if n.name not in existing]
    if finished:  # resume=True after the write finished: the same write, or refused
        check_finished_write(target, identity, names)
    return OmeZarrWrite(target, image_write, label_writes, names, remove, identity, resume, budget)
