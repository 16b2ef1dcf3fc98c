"""Pyramid planning: levels, their factors and shapes, their blocks, their memory.

Pure arithmetic on tuples, for multiscale images (OME-Zarr) and volumes
(Neuroglancer precomputed). A pyramid is a list of *levels*; level ``k`` is
the source downsampled by its cumulative ``factor`` (level 0: all ones),
computed from level ``k - 1`` by the *step* ``factor_k / factor_(k-1)``, so
every factor is a multiple of the one before. A level's shape is
``ceil(shape / factor)``: windows at the far end may be partial.

One axis, three levels with factors 1, 2, 4 (``#`` a voxel of the level)::

    level 0  |#|#|#|#|#|#|#|#|#|#|#|     11 voxels
    level 1  |###|###|###|###|###|#|      6 voxels (the last window partial)
    level 2  |#######|#######|###|        3 voxels

A level is downsampled region by region: regions whose edges fall on
multiples of the step (:func:`aligned_sizes`, then
:func:`downsample_blocks`; for a new image, the level's shards), each made
of whole windows and downsampled by one task from the pieces of the blocks
it overlaps (:mod:`shardpipe.core.downsample_region`). The memory such a
task holds is modelled by :func:`region_nbytes` (from
:func:`downsample_nbytes`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from shardpipe import advice
from shardpipe.core.grid import Box, Shape, ceildiv
from shardpipe.errors import InvalidArgumentError, MemoryBudgetError

__all__ = [
    "PyramidLevel",
    "aligned_sizes",
    "auto_factors",
    "check_factors",
    "downsample_blocks",
    "downsample_nbytes",
    "level_layout",
    "level_region",
    "level_shape",
    "plan_levels",
    "region_nbytes",
    "steps_of",
    "window_region",
]

TASK_OVERHEAD = 64 << 10
"""Bytes a downsampling task holds besides its arrays (NumPy's and Python's bookkeeping)."""

MAX_AUTO_LEVELS = 16
"""Most levels the default rule makes (a 2**16-fold reduction along the finest axis)."""

MAX_LEVELS = 64
"""Most levels a pyramid may have, level 0 included: halving an int64 extent reaches one
voxel in 63 steps. Given factors make at most 63 levels below level 0; a stored pyramid
(an OME-Zarr source) listing more is refused."""


@dataclass(frozen=True)
class PyramidLevel:
    """One level of a pyramid.

    Parameters
    ----------
    index : int
        0 for the full resolution.
    shape : tuple of int
        Voxels per axis, ``ceil(source shape / factor)``.
    factor : tuple of int
        Cumulative downsampling factor per axis, relative to level 0.
    step : tuple of int
        Factor relative to the level before (all ones for level 0).
    shard_shape, chunk_shape : tuple of int
        The level's shard and inner-chunk shapes.
    """

    index: int
    shape: Shape
    factor: Shape
    step: Shape
    shard_shape: Shape
    chunk_shape: Shape

    @property
    def n_shards(self) -> int:
        """Shards of the level (partial ones at the edges included)."""
        return math.prod(ceildiv(n, s) for n, s in zip(self.shape, self.shard_shape, strict=True))


def level_shape(shape: Shape, factor: Sequence[int]) -> Shape:
    """``ceil(shape / factor)`` per axis: the level keeps partial windows at the far end."""
    return tuple(ceildiv(n, f) for n, f in zip(shape, factor, strict=True))


def steps_of(factors: Sequence[Shape]) -> list[Shape]:
    """Each level's step from the one before (``factors`` start with level 0's ones)."""
    out = [tuple(1 for _ in factors[0])]
    for before, after in itertools.pairwise(factors):
        out.append(tuple(a // b for a, b in zip(after, before, strict=True)))
    return out


def check_factors(
    factors: Sequence[Shape],
    shape: Shape,
    parameter: str = "scale_factors",
    names: Sequence[str] | None = None,
) -> None:
    """Refuse factors no pyramid of ``shape`` can have.

    ``factors`` are the levels after level 0, each relative to level 0.
    Each is one positive integer per axis, a multiple of the one before
    (each level is computed from the one before) and not equal to it. They
    are bounded: at most :data:`MAX_LEVELS` levels in all (level 0
    included), and along every axis a level's step from the level before
    (its window) is no wider than that level is along the axis, so a
    factor is below twice the axis's length and an axis down to one voxel
    is not downsampled further.

    Parameters
    ----------
    factors : sequence of tuple of int
        Cumulative factors of the levels after level 0.
    shape : tuple of int
        Level 0's shape.
    parameter : str
        The argument the errors name.
    names : sequence of str, optional
        Axis names for the errors (default: ``axis 0``, ``axis 1``...).

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        Naming ``parameter``.
    """
    ndim = len(shape)
    fix = (
        "Pass cumulative factors relative to the full resolution, each a multiple of the one "
        "before, e.g. [2, 4, 8] or [{'x': 2, 'y': 2}, {'x': 4, 'y': 4, 'z': 2}]"
    )
    if len(factors) >= MAX_LEVELS:
        raise InvalidArgumentError(
            parameter,
            f"{len(factors)} levels after level 0; a pyramid has at most {MAX_LEVELS - 1} "
            f"({MAX_LEVELS} levels, level 0 included)",
            fix,
        )
    axis = [f"{n!r}" for n in names] if names is not None else [f"{d}" for d in range(ndim)]
    before = (1,) * ndim
    for k, factor in enumerate(factors, start=1):
        if len(factor) != ndim:
            raise InvalidArgumentError(
                parameter, f"level {k} has {len(factor)} factors for {ndim} axes", fix
            )
        if any(f < 1 for f in factor):
            raise InvalidArgumentError(parameter, f"level {k}: {factor} has a factor below 1", fix)
        if any(a % b for a, b in zip(factor, before, strict=True)):
            raise InvalidArgumentError(
                parameter,
                f"level {k}: {factor} is not a multiple of the level before it, {before} (each "
                "level is computed from the one before in the same pass)",
                fix,
            )
        if factor == before:
            raise InvalidArgumentError(
                parameter, f"level {k}: {factor} repeats the level before it", fix
            )
        extents = level_shape(shape, before)
        for d, (f, b, n) in enumerate(zip(factor, before, extents, strict=True)):
            if f // b > n:
                raise InvalidArgumentError(
                    parameter,
                    f"level {k}: {factor}: the step {f // b} along axis {axis[d]} is wider than "
                    f"the {n} voxel{'s' if n != 1 else ''} level {k - 1} has along it (factors "
                    "are bounded by the axis: each window lies within the level it downsamples)",
                    "Stop downsampling an axis once it is one voxel (a mapping by axis name "
                    "leaves it at its factor, e.g. {'y': 8, 'x': 8, 'z': 2}), and keep every "
                    "factor below twice the axis's length",
                )
        before = factor


def auto_factors(
    shape: Shape,
    downsampled: Sequence[bool],
    voxel_size: Sequence[float],
    chunk_shape: Shape,
    *,
    max_levels: int = MAX_AUTO_LEVELS,
) -> list[Shape]:
    """The default pyramid: halve the fine axes until a level fits in one inner chunk.

    At each level, an axis that may be downsampled (``downsampled``) and is
    longer than level 0's inner chunk along it is halved when its voxel size
    is within a factor two of the finest such axis: an anisotropic volume
    (``z`` voxels four times ``x``'s, say) is halved in ``x`` and ``y`` only
    until its voxels are near cubes, then in all three; a thin axis that one
    chunk already spans (60 ``z`` planes of a 700 x 500 image) is left whole.
    Levels are added while the level before spans more than one inner chunk
    along an axis that can be halved, as OME-Zarr viewers expect: a level
    small enough to show whole at the coarsest zoom, read in one request.
    A shard may hold a whole level (shards are about 256 MiB), so stopping
    at one shard would leave most images with no pyramid at all.

    Returns
    -------
    list of tuple of int
        Cumulative factors of the levels after level 0 (empty: no pyramid).
    """
    ndim = len(shape)
    factor = (1,) * ndim
    size = [float(v) for v in voxel_size]
    out: list[Shape] = []
    while len(out) < max_levels:
        current = level_shape(shape, factor)
        halvable = [d for d in range(ndim) if downsampled[d] and current[d] > chunk_shape[d]]
        if not halvable:
            break  # the level fits in one inner chunk along every axis that could shrink
        finest = min(size[d] for d in halvable)
        step = [2 if d in halvable and size[d] < 2 * finest else 1 for d in range(ndim)]
        factor = tuple(f * s for f, s in zip(factor, step, strict=True))
        size = [v * s for v, s in zip(size, step, strict=True)]
        out.append(factor)
    return out


def level_layout(shape: Shape, shard_shape: Shape, chunk_shape: Shape) -> tuple[Shape, Shape]:
    """``(shards, chunks)`` for a level of ``shape``: the given ones, clipped to the level.

    An axis shorter than an inner chunk gets one chunk of its length; one
    shorter than a shard gets a shard of just enough whole chunks.
    """
    shards, chunks = [], []
    for n, s, c in zip(shape, shard_shape, chunk_shape, strict=True):
        if n <= c:
            shards.append(n)
            chunks.append(n)
        elif n < s:
            shards.append(ceildiv(n, c) * c)
            chunks.append(c)
        else:
            shards.append(s)
            chunks.append(c)
    return tuple(shards), tuple(chunks)


def plan_levels(
    shape: Shape,
    factors: Sequence[Shape],
    shard_shapes: Sequence[Shape],
    chunk_shapes: Sequence[Shape],
) -> list[PyramidLevel]:
    """The levels of a pyramid: level 0 then one per factor, each with its shards and chunks.

    ``shard_shapes`` and ``chunk_shapes`` have one entry per level; each is
    clipped to its level (:func:`level_layout`).
    """
    all_factors = [(1,) * len(shape), *factors]
    levels = []
    for k, (factor, step) in enumerate(zip(all_factors, steps_of(all_factors), strict=True)):
        scaled = level_shape(shape, factor)
        shards, chunks = level_layout(scaled, shard_shapes[k], chunk_shapes[k])
        levels.append(PyramidLevel(k, scaled, factor, step, shards, chunks))
    return levels


def aligned_sizes(sizes: Sequence[int], step: int) -> tuple[int, ...]:
    """Block sizes near ``sizes`` whose edges are multiples of ``step`` (the last one free)."""
    total = sum(sizes)
    target = max(step, (max(sizes) // step) * step)
    out = [target] * (total // target)
    if total % target:
        out.append(total % target)
    return tuple(out)


def _wide_itemsize(dtype: np.dtype[np.generic], window: int) -> int:
    """Bytes per element of the sums the mean takes (:mod:`shardpipe.core.downsample`)."""
    if dtype.kind == "c":
        return 16
    if dtype.kind == "f":
        return 8
    bits = 8 * dtype.itemsize + window.bit_length()
    return 8 if bits > 32 else (4 if bits > 16 else 2)


def downsample_nbytes(
    block_shape: Sequence[int], step: Sequence[int], dtype: np.dtype[np.generic], method: str
) -> int:
    """Most bytes one task holds downsampling a block of ``block_shape`` by ``step``.

    The copies :func:`~shardpipe.core.downsample.downsample_block` makes,
    counted over the block ``n`` voxels of ``s`` bytes, its windows padded to
    ``n'`` voxels, and the output's ``m`` voxels:

    * ``mean``: the block, the sums after the first and second axes halved
      (in a wide type of ``w`` bytes: ``2 n / f_1 w`` at most), and about
      seven arrays of ``m`` wide values (quotient, remainder, rounding);
      sums past 64 bits (``uint64``/``int64`` data) hold three 8-byte copies
      of the block; ``float64`` data two more (the range check);
    * ``mode``: the block, its padded copy, the windows laid out as rows and
      sorted (three copies of ``n' s`` bytes), the sort order (``8 n'``) and
      about four masks of ``n'`` bytes;
    * ``nearest``: the block and the output;

    and :data:`TASK_OVERHEAD` for each.
    """
    n = math.prod(block_shape)
    s = dtype.itemsize
    out = math.prod(ceildiv(b, f) for b, f in zip(block_shape, step, strict=True))
    window = math.prod(step)
    if method == "nearest":
        return n * s + out * s + TASK_OVERHEAD
    if method == "mode":
        padded = math.prod(ceildiv(b, f) * f for b, f in zip(block_shape, step, strict=True))
        return n * s + padded * (3 * s + 8 + 4) + out * (s + 24) + TASK_OVERHEAD
    wide = _wide_itemsize(dtype, window)
    first = max((f for f in step if f > 1), default=1)
    total = n * s + 2 * (n // first) * wide + 7 * out * wide + out * s + TASK_OVERHEAD
    if dtype.kind in "iu" and 8 * s + window.bit_length() > 64:
        total += 3 * 8 * n
    if dtype.kind == "f" and s >= 8:
        total += 2 * 8 * n
    return total


def region_nbytes(
    region: Sequence[int],
    step: Sequence[int],
    dtype: np.dtype[np.generic],
    method: str,
    *,
    joined: bool,
) -> int:
    """Most bytes a task downsampling a region of ``region``'s shape holds.

    The task (:func:`~shardpipe.core.downsample_region.downsample_region`)
    holds the pieces of the blocks it is given (views, the region's size
    at most) and downsamples them: piece by piece, bounded by the whole
    region's downsampling (:func:`downsample_nbytes`, which counts the block
    it is given and the output); or, ``joined``, after copying them into one
    region: the region's bytes once more.
    """
    model = downsample_nbytes(region, step, dtype, method)
    if joined:
        model += math.prod(region) * dtype.itemsize
    return model


def _regular(total: int, size: int) -> tuple[int, ...]:
    size = max(1, min(size, total))
    return (size,) * (total // size) + ((total % size,) if total % size else ())


def downsample_blocks(
    chunks: Sequence[Sequence[int]],
    step: Sequence[int],
    dtype: np.dtype[np.generic],
    method: str,
    *,
    target_nbytes: int,
    budget: int,
    joined: bool = False,
    what: str = "downsample",
) -> tuple[tuple[int, ...], ...]:
    """The regions a level is cut into, one downsampling task each, to downsample it by ``step``.

    ``chunks`` are the sizes wished for (the level's Dask blocks, or its
    shards). Along every axis with a step above one, they are aligned to
    multiples of the step (:func:`aligned_sizes`); axes with step one keep
    theirs. Regions are then grown (doubled along the downsampled axes, the
    shortest first) while a region holds at most ``target_nbytes`` (about
    the source's blocks: deep levels would otherwise be made of tiny
    blocks; 0 keeps the sizes wished for) and its task fits ``budget``; or
    shrunk (halved along the longest axis, in whole windows) until its task
    fits ``budget``. A task's memory is :func:`region_nbytes` (``joined``:
    windows straddle the level's blocks, so regions are joined copies).

    Raises
    ------
    shardpipe.errors.MemoryBudgetError
        When even a region of one window per axis does not fit ``budget``.
    """
    ndim = len(chunks)
    totals = [sum(c) for c in chunks]
    aligned = [
        aligned_sizes(tuple(chunks[d]), step[d]) if step[d] > 1 else tuple(chunks[d])
        for d in range(ndim)
    ]
    shape = [max(aligned[d]) for d in range(ndim)]
    changed = False

    def task(block: Sequence[int]) -> int:
        return region_nbytes(block, step, dtype, method, joined=joined)

    def in_nbytes(block: Sequence[int]) -> int:
        return math.prod(block) * dtype.itemsize

    while task(shape) > budget:
        d = max(range(ndim), key=lambda a: (shape[a] // step[a], -a))
        if shape[d] <= step[d]:
            raise MemoryBudgetError(
                what,
                task(shape),
                budget,
                f"a block of one window per axis ({tuple(step)} voxels of {dtype}) does not "
                f"fit; raise {advice.name('max_mem')} or downsample by smaller steps",
            )
        shape[d] = max(step[d], (shape[d] // 2 // step[d]) * step[d])
        changed = True
    if not changed:
        growable = [d for d in range(ndim) if step[d] > 1]
        while growable:
            d = min(growable, key=lambda a: (shape[a] / max(totals[a], 1), a))
            bigger = list(shape)
            bigger[d] = shape[d] * 2
            if shape[d] >= totals[d] or in_nbytes(bigger) > target_nbytes or task(bigger) > budget:
                growable.remove(d)
                continue
            shape = bigger
            changed = True
    if not changed:
        return tuple(aligned)
    return tuple(
        aligned[d]
        if step[d] == 1 and shape[d] == max(aligned[d])
        else _regular(totals[d], shape[d])
        for d in range(ndim)
    )


def level_region(region: Box, factor: Sequence[int], shape: Shape) -> Box:
    """The box of a level (of ``factor``, ``shape``) whose windows touch ``region`` of level 0.

    A region write of level 0 changes every window it touches: those are
    the level's voxels to compute again.
    """
    return tuple(
        (a // f, min(ceildiv(b, f), n)) for (a, b), f, n in zip(region, factor, shape, strict=True)
    )


def window_region(region: Box, factor: Sequence[int], shape: Shape) -> Box:
    """The box of level 0 (of ``shape``) covered by the windows of ``factor`` touching ``region``.

    What a level of ``factor`` is computed from when ``region`` changes: the
    region widened to whole windows (clipped at the far end).
    """
    return tuple(
        ((a // f) * f, min(ceildiv(b, f) * f, n))
        for (a, b), f, n in zip(region, factor, shape, strict=True)
    )
