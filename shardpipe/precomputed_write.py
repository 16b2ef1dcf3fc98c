"""``to_neuroglancer_precomputed``: a Dask array as a sharded Neuroglancer precomputed volume.

The ``info`` file is written first, then every shard file, each by one
task in one atomic put (temporary file and rename locally, one PUT on S3):
a viewer opening the volume during the write sees every shard absent (read
as zeros) or complete. A ``kill -9`` leaves the shards published so far,
each complete.

With the identity hash and shard bits reaching the top of the chunk ids
(``sharding="auto"`` always), every shard is an aligned box of chunks: its
task takes that box of the source and cuts the chunks itself. Otherwise
(murmurhash) a shard's chunks are scattered over the volume; its task takes
each chunk's voxels, which Dask slices out of the blocks holding them.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Sequence
from typing import Any

import dask.array as da
import numpy as np
from dask.delayed import Delayed, delayed

from shardpipe.checks import check_bool, check_progress
from shardpipe.core.precomputed_plan import (
    ScaleGrid,
    auto_sharding,
    largest_shard_chunks,
    shards_of,
)
from shardpipe.errors import ArrayExistsError, InvalidArgumentError, MemoryBudgetError
from shardpipe.formats.precomputed import PrecomputedSharding
from shardpipe.precomputed_tasks import PrecomputedTarget, write_box_shard, write_scattered_shard
from shardpipe.reports import WriteReport, add_reports
from shardpipe.storage.resolve import ResolvedStore, resolve_store
from shardpipe.validate import check_max_mem

DATA_TYPES = ("uint8", "uint16", "uint32", "uint64", "float32")
VOLUME_TYPES = ("image", "segmentation")
TASK_COPIES = 3
"""A shard task holds its raw box, the encoded chunks and the joined shard file."""


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
    overwrite: bool = False,
    storage_options: dict[str, Any] | None = None,
    max_mem: int | str = "1GiB",
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
    encoding : {"raw"}
        Chunk encoding. ``"jpeg"`` and ``"compressed_segmentation"`` are not
        written yet (a clear error). Compress chunks with
        ``sharding={..., "data_encoding": "gzip"}``.
    sharding : "auto" or dict
        ``"auto"`` (the rule in :mod:`shardpipe.core.precomputed_plan`) or a
        ``neuroglancer_uint64_sharded_v1`` object.
    scales : None
        One scale (the source's resolution); pyramids are not written yet.
    overwrite : bool
        Replace a volume already at ``store`` (its ``info`` and this scale's shards).
    storage_options : dict, optional
        fsspec options for URLs; ``{"fsync": bool}`` for local paths.
    max_mem : int or str
        Memory budget per task: a shard's task holds its raw chunks about
        three times over (raw, encoded, joined).
    compute : bool
        Write now and return the report, or return a ``Delayed`` that writes
        the shards (the ``info`` file is written at once either way).
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
    _check_encoding(encoding, source.dtype)
    if scales is not None and [tuple(s) for s in scales] != [(1, 1, 1)]:
        raise InvalidArgumentError(
            "scales",
            f"{scales!r}: pyramids are not written yet, only the source's own scale",
            "Leave scales out (or pass [(1, 1, 1)])",
        )
    budget = check_max_mem(max_mem)
    scale = ScaleGrid(size, chunks)
    channels = int(source.shape[3])
    chunk_nbytes = math.prod(chunks) * channels * source.dtype.itemsize
    spec = (
        auto_sharding(scale, chunk_nbytes, budget // TASK_COPIES)
        if isinstance(sharding, str) and sharding == "auto"
        else PrecomputedSharding.from_json(sharding)
    )
    projected = TASK_COPIES * chunk_nbytes * largest_shard_chunks(scale, spec)
    if projected > budget:
        raise MemoryBudgetError(
            "write-precomputed-shard",
            projected,
            budget,
            "a shard's task holds its chunks about three times over; raise max_mem, or use "
            "fewer preshift and minishard bits (smaller shards)",
        )
    target = resolve_store(store, None, storage_options)
    key = _scale_key(res)
    info = _info(
        source.dtype, channels, volume_type, key, size, res, offset, chunks, encoding, spec
    )
    _write_info(target, info, key, overwrite)
    token = uuid.uuid4().hex[:12]
    ship = PrecomputedTarget(target.shards, target.key(f"{key}/"), scale, spec)
    parts = []
    for n, shard in enumerate(shards_of(scale, spec)):
        name = f"write-precomputed-shard-{token}-{n}"
        if shard.box is not None:
            box = source[(*shard.box, slice(None))]
            parts.append(
                delayed(write_box_shard, pure=False)(ship, box, shard=shard, dask_key_name=name)
            )
        else:
            pieces = [source[(*scale.chunk_box(c), slice(None))] for c in shard.coords]
            parts.append(
                delayed(write_scattered_shard, pure=False)(
                    ship, *pieces, shard=shard, dask_key_name=name
                )
            )
    total: Delayed = delayed(add_reports, pure=False)(*parts, dask_key_name=f"write-done-{token}")
    if not compute:
        return total
    if progress:
        from dask.diagnostics.progress import ProgressBar

        with ProgressBar():
            report: WriteReport = total.compute()
        return report
    computed: WriteReport = total.compute()
    return computed


def _as_xyzc(arr: Any) -> da.Array:
    if not isinstance(arr, da.Array | np.ndarray):
        raise InvalidArgumentError(
            "arr",
            f"expected a Dask or NumPy array, got {type(arr).__name__}",
            "Wrap the data with dask.array.from_array(...) first",
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
    try:
        items = [float(v) for v in value]
    except (TypeError, ValueError):
        items = []
    if len(items) != 3 or not all(v > 0 and math.isfinite(v) for v in items):
        raise InvalidArgumentError(
            "resolution",
            f"expected three positive numbers (nm per voxel along x, y, z), got {value!r}",
            "Pass e.g. [8, 8, 40]",
        )
    return tuple(items)


def _check_encoding(encoding: Any, dtype: np.dtype[Any]) -> None:
    if encoding == "raw":
        return
    if encoding in ("jpeg", "compressed_segmentation", "png"):
        raise InvalidArgumentError(
            "encoding",
            f"{encoding!r} chunks are not written yet (dtype {dtype})",
            "Use encoding='raw', with sharding data_encoding 'gzip' to compress",
        )
    raise InvalidArgumentError(
        "encoding", f"{encoding!r} is not a precomputed chunk encoding", "Use encoding='raw'"
    )


def _scale_key(resolution: tuple[float, ...]) -> str:
    """The scale's directory: its resolution joined by ``_`` (``8_8_40``), as tensorstore does."""
    return "_".join(f"{int(r)}" if float(r).is_integer() else f"{r:g}" for r in resolution)


def _info(
    dtype: np.dtype[Any],
    channels: int,
    volume_type: str,
    key: str,
    size: tuple[int, ...],
    resolution: tuple[float, ...],
    offset: tuple[int, ...],
    chunks: tuple[int, ...],
    encoding: str,
    sharding: PrecomputedSharding,
) -> dict[str, Any]:
    return {
        "@type": "neuroglancer_multiscale_volume",
        "type": volume_type,
        "data_type": np.dtype(dtype).name,
        "num_channels": channels,
        "scales": [
            {
                "key": key,
                "size": list(size),
                "resolution": list(resolution),
                "voxel_offset": list(offset),
                "chunk_sizes": [list(chunks)],
                "encoding": encoding,
                "sharding": sharding.to_json(),
            }
        ],
    }


def _write_info(target: ResolvedStore, info: dict[str, Any], key: str, overwrite: bool) -> None:
    """Write ``info`` (after removing an old volume's scale when ``overwrite``)."""
    store, info_key = target.shards, target.key("info")
    if store.get(info_key) is not None:
        if not overwrite:
            raise ArrayExistsError(
                f"store: a precomputed volume already exists at {target.zarr_store} "
                "(its info file); pass overwrite=True to replace it"
            )
        for old in list(store.list(target.key(f"{key}/"))):
            store.delete(old)
    store.put(info_key, [json.dumps(info, indent=1).encode()])
