"""``to_neuroglancer_precomputed``: a Dask array as a sharded Neuroglancer precomputed volume.

A marker (:data:`~shardpipe.storage.keys.PRECOMPUTED_UNFINISHED`) is written first, then
the ``info`` file, then every shard file, each published by one task atomically (a
temporary file and a rename locally, one PUT or a completed multipart upload on S3): a
viewer opening the volume during the write sees every shard absent (read as zeros) or
complete. The last task removes the marker. A write that fails (or a ``kill -9``) leaves
the marker, the shards published so far, each complete, and at most one temporary file
per shard in flight: ``verify`` reports the unfinished write as a problem until the
volume is written again with ``overwrite=True`` (it notes the temporary files;
``shardpipe cleanup`` does not know precomputed volumes: delete the files ending in
:data:`~shardpipe.storage.keys.TEMPORARY_SUFFIX`). A task's error that is not a
``ShardpipeError`` is raised as a :class:`~shardpipe.errors.WriteFailedError` whose
cause it is.

The graph is :mod:`shardpipe.precomputed.graph`'s: with the identity hash
and shard bits reaching the top of the chunk ids (``sharding="auto"``
always), every shard is an aligned box of chunks, cut by its own task from
the blocks overlapping it; with murmurhash, chunks are encoded where their
blocks are and grouped by shard.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import dask.array as da
import numpy as np
from dask.delayed import Delayed

from shardpipe.core.checks import check_bool, check_progress
from shardpipe.core.downsample import METHODS
from shardpipe.core.memory import DEFAULT_MAX_MEM
from shardpipe.core.precomputed_plan import ScaleGrid, check_scattered
from shardpipe.engine.reports import WriteReport
from shardpipe.errors import (
    InvalidArgumentError,
)
from shardpipe.formats.precomputed import PrecomputedSharding
from shardpipe.formats.precomputed_chunks import CSEG_BLOCK, check_encoding
from shardpipe.formats.precomputed_info import MAX_CHUNK_NBYTES
from shardpipe.precomputed.auto_sharding import auto_sharding
from shardpipe.precomputed.graph import part_chunks
from shardpipe.precomputed.job import PrecomputedWrite
from shardpipe.storage.resolve import resolve_store
from shardpipe.stored.places import check_not_a_file, check_target
from shardpipe.write.arguments import check_max_mem
from shardpipe.write.job import RunOptions, run_checked_job
from shardpipe.write.options import ARRAY_PARAMETERS
from shardpipe.write.parameters import shares_parameters

DATA_TYPES = ("uint8", "uint16", "uint32", "uint64", "float32")
VOLUME_TYPES = ("image", "segmentation")
TASK_COPIES = 3
"""A shard task holds its raw box, the encoded chunks and the joined shard file."""


@shares_parameters(ARRAY_PARAMETERS)
def to_neuroglancer_precomputed(
    arr: Any,
    store: Any,
    *,
    resolution: Sequence[float],
    chunk_size: Sequence[int],
    voxel_offset: Sequence[int] = (0, 0, 0),
    volume_type: str = "image",
    encoding: str = "raw",
    sharding: Any = "auto",
    scales: Any = None,
    downsample: str = "auto",
    overwrite: bool = False,
    storage_options: dict[str, Any] | None = None,
    max_mem: int | str = DEFAULT_MAX_MEM,
    compute: bool = True,
    progress: bool = False,
) -> WriteReport | Delayed:
    """Write ``arr`` as a sharded Neuroglancer precomputed volume (one scale).

    Parameters
    ----------
    arr : dask.array.Array or numpy.ndarray
        Indexed ``(x, y, z)`` or ``(x, y, z, channel)``, as tensorstore and
        cloud-volume index precomputed volumes. A ``(z, y, x)`` volume is
        passed as ``arr.transpose(2, 1, 0)`` (a view: nothing is copied).
    store : str, os.PathLike or zarr Store
        The volume's directory: a local path or an fsspec URL (``s3://...``).
    resolution : sequence of float
        Nanometres per voxel along x, y, z.
    chunk_size : sequence of int
        Voxels per chunk along x, y, z.
    voxel_offset : sequence of int
        Where the volume starts, in voxels.
    volume_type : {"image", "segmentation"}
        The ``type`` of the ``info`` file.
    encoding : {"raw", "jpeg", "compressed_segmentation"}
        Chunk encoding (:mod:`shardpipe.formats.precomputed_chunks`): ``raw``
        for any data type and volume type (the default; ``sharding="auto"``
        gzips it in the shards, losslessly), ``jpeg`` for uint8 images of 1
        or 3 channels (lossy), ``compressed_segmentation`` for uint32/uint64
        labels.
    sharding : "auto", dict or list
        ``"auto"`` (the rule in :mod:`shardpipe.precomputed.auto_sharding`,
        per scale: boxes of chunks within the memory budget, the chunks
        gzip'd, ``data_encoding: "gzip"``, unless they are ``jpeg``), a
        ``neuroglancer_uint64_sharded_v1`` object for every scale, or a list
        of one (or ``"auto"``) per scale.
    scales : list of (int, int, int), optional
        Downsampling factors of the scales to write, e.g. ``[(1, 1, 1), (2, 2,
        1), (4, 4, 2)]``: the first is the source, each a multiple of the one
        before. Every scale is computed from the one before inside the same
        Dask graph, so the source is read once. Default: the source alone.
    downsample : {"auto", "mean", "mode"}
        How a scale is made from the one before (:mod:`shardpipe.core.downsample`);
        ``"auto"``: the mean for images, the mode for segmentations.
    overwrite : bool
        Replace a volume already at ``store`` (its ``info`` and this scale's shards).
    max_mem : int or str
        Memory budget per task: a shard's task holds its raw chunks about
        three times over (raw, encoded, joined).
    compute : bool
        Write now and return the report, or return a ``Delayed`` that writes
        the shards (the ``info`` file and the unfinished-write marker are
        written at once either way; the ``Delayed`` removes the marker last).
    progress : bool
        Show Dask's progress bar (local schedulers).

    Returns
    -------
    WriteReport or dask.delayed.Delayed
        Shards written, chunks, bytes.

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        On bad arguments, before anything is written.
    shardpipe.errors.MemoryBudgetError
        If a shard's task cannot fit ``max_mem``.
    shardpipe.errors.ArrayExistsError
        If a volume is at ``store`` and ``overwrite`` is False.
    shardpipe.errors.WriteFailedError
        If a task failed part way with an error that is not a ``ShardpipeError``
        (its cause); shardpipe's own errors are raised as they are. Either way the
        volume is left marked unfinished (``verify`` reports it).
    """
    progress, compute = check_progress(progress, compute)
    overwrite = check_bool("overwrite", overwrite)
    source = _as_xyzc(arr)
    size = tuple(int(n) for n in source.shape[:3])
    chunks = _positive_ints("chunk_size", chunk_size, example="[64, 64, 64]")
    offset = _ints("voxel_offset", voxel_offset)
    res = _resolution(resolution)
    if volume_type not in VOLUME_TYPES:
        raise InvalidArgumentError(
            "volume_type",
            f"{volume_type!r} is not one of {VOLUME_TYPES}",
            "Pass 'image' or 'segmentation'",
        )
    encoding = check_encoding(encoding, source.dtype, int(source.shape[3]))
    factors = _check_scales(scales)
    method = _check_downsample(downsample, volume_type)
    budget = check_max_mem(max_mem)
    channels = int(source.shape[3])
    chunk_nbytes = math.prod(chunks) * channels * source.dtype.itemsize
    if (largest := chunk_nbytes_of(size, chunks, channels, source.dtype)) > MAX_CHUNK_NBYTES:
        raise InvalidArgumentError(
            "chunk_size",
            f"{list(chunks)} makes chunks of {largest:,} bytes, more than the "
            f"{MAX_CHUNK_NBYTES:,} a precomputed chunk may hold (viewers decode whole "
            "chunks; verify refuses larger)",
            "Pass smaller chunks, e.g. [64, 64, 64]",
        )
    specs = _check_sharding(sharding, len(factors))
    target = resolve_store(store, None, storage_options)  # nothing written yet
    check_not_a_file(target, "store")
    check_target(target, overwrite=True)  # writable (an existing volume is checked below)
    levels = []
    for factor, spec in zip(factors, specs, strict=True):
        scaled = tuple(-(-n // f) for n, f in zip(size, factor, strict=True))
        grid = ScaleGrid(scaled, chunks)
        if spec is None:
            spec = auto_sharding(grid, chunk_nbytes, budget // TASK_COPIES, encoding)
        check_scattered(grid, spec, factor)  # before any per-chunk plan
        parts = part_chunks(grid, spec, TASK_COPIES * chunk_nbytes, budget, factor, target)
        levels.append((factor, grid, spec, parts))
    scale_infos = [
        _scale_info(grid, res, factor, offset, encoding, spec) for factor, grid, spec, _ in levels
    ]
    job = PrecomputedWrite(
        target,
        source,
        levels,
        scale_infos,
        _info(source.dtype, channels, volume_type, scale_infos),
        method,
        overwrite,
    )
    if not compute:
        return job.to_delayed()
    return run_checked_job(job, RunOptions(progress))


def _check_scales(scales: Any) -> list[tuple[int, ...]]:
    """The scales' downsampling factors: the first (1, 1, 1), each a multiple of the one before."""
    if scales is None:
        return [(1, 1, 1)]
    fix = (
        "Pass e.g. scales=[(1, 1, 1), (2, 2, 1), (4, 4, 2)]: integer factors, each a multiple "
        "of the one before"
    )
    try:
        factors = [tuple(s) for s in scales]
    except TypeError:
        raise InvalidArgumentError(
            "scales", f"expected a list of factors, got {scales!r}", fix
        ) from None
    for factor in factors:
        if len(factor) != 3 or not all(
            isinstance(f, int | np.integer) and not isinstance(f, bool) and f >= 1 for f in factor
        ):
            raise InvalidArgumentError(
                "scales", f"{factor!r} is not three positive integer factors", fix
            )
    if not factors or factors[0] != (1, 1, 1):
        raise InvalidArgumentError("scales", f"{scales!r} does not start with (1, 1, 1)", fix)
    for before, after in itertools.pairwise(factors):
        if any(a % b for a, b in zip(after, before, strict=True)) or after == before:
            raise InvalidArgumentError(
                "scales", f"{after} is not a larger multiple of the scale before it, {before}", fix
            )
    return [tuple(int(f) for f in factor) for factor in factors]


def _check_downsample(downsample: Any, volume_type: str) -> str:
    if downsample == "auto":
        return "mode" if volume_type == "segmentation" else "mean"
    if downsample not in METHODS:
        raise InvalidArgumentError(
            "downsample",
            f"{downsample!r} is not one of {('auto', *METHODS)}",
            "Pass 'mean' (images), 'mode' (segmentations) or 'auto'",
        )
    return str(downsample)


def _check_sharding(sharding: Any, n_scales: int) -> list[PrecomputedSharding | None]:
    """Per scale, the explicit spec, or None for ``auto``: one spec for all, or a list."""
    if isinstance(sharding, str) and sharding == "auto":
        return [None] * n_scales
    if isinstance(sharding, list | tuple):
        if len(sharding) != n_scales:
            raise InvalidArgumentError(
                "sharding",
                f"{len(sharding)} specs for {n_scales} scales",
                "Pass one spec (or 'auto') per scale, or one spec for all",
            )
        return [None if s == "auto" else PrecomputedSharding.from_json(s) for s in sharding]
    return [PrecomputedSharding.from_json(sharding)] * n_scales


def _as_xyzc(arr: Any) -> da.Array:
    if not isinstance(arr, da.Array | np.ndarray):
        kind = type(arr).__name__
        fixes = {
            "Dataset": "A volume holds one array: pass a variable's, ds['name'].data "
            "(indexed x, y, z; transpose it if not); ds.shard.to_zarr writes a whole Dataset "
            "as Zarr",
            "DataArray": "Pass its array, da.data (indexed x, y, z; transpose it if not); "
            "da.shard.to_zarr writes it as Zarr",
        }
        raise InvalidArgumentError(
            "arr",
            f"expected a Dask or NumPy array, got {kind}",
            fixes.get(kind, "Wrap the data with dask.array.from_array(...) first"),
        )
    if arr.ndim not in (3, 4):
        raise InvalidArgumentError(
            "arr",
            f"{arr.ndim} dimensions; a precomputed volume is (x, y, z) or (x, y, z, channel)",
            "Pass a 3-D or 4-D array; a (z, y, x) volume as arr.transpose(2, 1, 0)",
        )
    if np.dtype(arr.dtype).name not in DATA_TYPES:
        raise InvalidArgumentError(
            "arr",
            f"dtype {arr.dtype} is not a precomputed data type {DATA_TYPES}",
            "Cast the array, e.g. arr.astype('uint16')",
        )
    source = arr if isinstance(arr, da.Array) else da.from_array(arr)
    if any(math.isnan(c) for dim in source.chunks for c in dim):
        raise InvalidArgumentError(
            "arr", "its Dask chunk sizes are unknown", "Call arr.compute_chunk_sizes() first"
        )
    if source.ndim == 3:
        source = source[..., None]
    if source.numblocks[3] > 1:  # a chunk holds every channel: so does each block
        source = source.rechunk({3: -1})
    if any(n == 0 for n in source.shape):
        raise InvalidArgumentError("arr", f"shape {arr.shape} has an empty dimension", "Pass data")
    return source


def _positive_ints(name: str, value: Any, *, example: str) -> tuple[int, ...]:
    out = _ints(name, value)
    if any(v < 1 for v in out):
        raise InvalidArgumentError(
            name,
            f"{list(value)} has a size below 1",
            f"Pass positive voxel counts such as {example}",
        )
    return out


def _ints(name: str, value: Any) -> tuple[int, ...]:
    try:
        items = list(value)
    except TypeError:
        items = None
    if (
        items is None
        or len(items) != 3
        or not all(isinstance(v, int | np.integer) and not isinstance(v, bool) for v in items)
    ):
        raise InvalidArgumentError(
            name, f"expected three integers (x, y, z), got {value!r}", "Pass e.g. [64, 64, 64]"
        )
    return tuple(int(v) for v in items)


def _resolution(value: Any) -> tuple[float, ...]:
    """Three positive finite numbers; strings and booleans are refused, never coerced."""
    fix = "Pass three numbers, e.g. [8, 8, 40]"
    try:
        items = list(value)
    except TypeError:
        items = []
    for item in items:
        if isinstance(item, bool | np.bool_) or not isinstance(
            item, int | float | np.integer | np.floating
        ):
            raise InvalidArgumentError(
                "resolution",
                f"{item!r} ({type(item).__name__}) in {value!r} is not a number",
                fix,
            )
    if len(items) != 3 or not all(0 < float(v) < math.inf for v in items):
        raise InvalidArgumentError(
            "resolution",
            f"expected three positive numbers (nm per voxel along x, y, z), got {value!r}",
            fix,
        )
    return tuple(float(v) for v in items)


def chunk_nbytes_of(
    size: tuple[int, ...], chunks: tuple[int, ...], channels: int, dtype: np.dtype[Any]
) -> int:
    """Bytes of the largest chunk: its box clipped to the volume, every channel."""
    return math.prod(min(c, n) for c, n in zip(chunks, size, strict=True)) * (
        channels * np.dtype(dtype).itemsize
    )


def _scale_key(resolution: tuple[float, ...]) -> str:
    """The scale's directory: its resolution joined by ``_`` (``8_8_40``), as tensorstore does."""
    return "_".join(f"{int(r)}" if float(r).is_integer() else f"{r:g}" for r in resolution)


def _scale_info(
    grid: ScaleGrid,
    resolution: tuple[float, ...],
    factor: tuple[int, ...],
    offset: tuple[int, ...],
    encoding: str,
    sharding: PrecomputedSharding,
) -> dict[str, Any]:
    scaled = tuple(r * f for r, f in zip(resolution, factor, strict=True))
    extra = {"compressed_segmentation_block_size": list(CSEG_BLOCK)}
    return {
        "key": _scale_key(scaled),
        "size": list(grid.size),
        "resolution": list(scaled),
        "voxel_offset": [o // f for o, f in zip(offset, factor, strict=True)],
        "chunk_sizes": [list(grid.chunk_size)],
        "encoding": encoding,
        "sharding": sharding.to_json(),
        **(extra if encoding == "compressed_segmentation" else {}),
    }


def _info(
    dtype: np.dtype[Any], channels: int, volume_type: str, scales: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "@type": "neuroglancer_multiscale_volume",
        "type": volume_type,
        "data_type": np.dtype(dtype).name,
        "num_channels": channels,
        "scales": scales,
    }
