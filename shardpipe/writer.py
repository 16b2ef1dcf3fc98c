"""``to_sharded_zarr``: write a Dask array as a sharded Zarr v3 array."""

from __future__ import annotations

import uuid
from typing import Any

import zarr
from dask.delayed import Delayed

from shardpipe.core.grid import BlockGrid, ShardLayout
from shardpipe.core.plan import PlanError, WritePlan, plan_write
from shardpipe.encoding import ChunkCodec
from shardpipe.errors import InvalidArgumentError
from shardpipe.graph import build_write_graph
from shardpipe.progress import distributed_client, run_publishing
from shardpipe.storage.resolve import ResolvedStore, resolve_store
from shardpipe.tasks import WriteTarget
from shardpipe.validate import (
    as_dask_array,
    build_metadata,
    check_array,
    check_fill_value,
    check_index_location,
    check_max_mem,
    check_target,
    resolve_shapes,
)

DEFAULT_MAX_MEM = "1GiB"
"""Default memory budget per task (see ``to_sharded_zarr``'s ``max_mem``)."""

STAGING_DIR = ".shardpipe-staging"


def to_sharded_zarr(
    arr: Any,
    store: Any,
    *,
    path: str | None = None,
    shards: Any = None,
    chunks: Any = None,
    compressors: Any = "auto",
    filters: Any = None,
    serializer: Any = "auto",
    fill_value: Any = None,
    index_location: str = "end",
    dimension_names: Any = None,
    attributes: dict[str, Any] | None = None,
    overwrite: bool = False,
    storage_options: dict[str, Any] | None = None,
    write_empty_chunks: bool = False,
    max_mem: int | str = DEFAULT_MAX_MEM,
    progress: bool = False,
    compute: bool = True,
) -> zarr.Array[Any] | Delayed:
    """Write a Dask array to a Zarr v3 array sharded with ``sharding_indexed``.

    Every shard object has exactly one writing task; no locks are taken.
    Dask blocks may have any chunking: blocks holding whole shards write
    them directly, other blocks encode the inner chunks they hold where they
    live and send only encoded bytes (plus the bits of inner chunks that
    straddle block edges) to the one task that assembles each shard.

    Parameters
    ----------
    arr : dask.array.Array or numpy.ndarray
        The data. A NumPy array is wrapped in blocks of one shard.
    store : str, os.PathLike, zarr Store or zarr Group
        Where to write: a local path, an fsspec URL (``"s3://bucket/x.zarr"``),
        a zarr ``Store``, or a ``Group`` (the array goes at ``path`` in it).
    path : str, optional
        Path of the array inside ``store``; the store's root by default.
    shards : tuple of int, optional
        Shard shape. Default: about 256 MiB of whole inner chunks, near a
        cube, no larger than the array needs.
    chunks : tuple of int, optional
        Inner chunk shape; must divide ``shards``. Default: about 1 MiB, near
        a cube, power-of-two sides (dividing ``shards`` if given).
    compressors, filters, serializer
        Inner-chunk codecs, exactly as in ``zarr.create_array``.
    fill_value : scalar, optional
        Value of elements never written; zarr's default for the dtype if None.
    index_location : {"end", "start"}
        Where each shard's index goes.
    dimension_names : sequence of str, optional
        Names of the dimensions, stored in the metadata.
    attributes : dict, optional
        User attributes stored in the metadata.
    overwrite : bool
        Replace an existing array or group at ``path``. Without it, an
        existing node is an error and nothing is touched.
    storage_options : dict, optional
        fsspec options for URLs; for local paths only ``{"fsync": bool}``
        (default True: shards are made durable before they appear).
    write_empty_chunks : bool
        Store inner chunks that equal the fill value everywhere. Default
        False: they are left out of the shard (and wholly empty shards are
        not written at all).
    max_mem : int or str
        Memory budget per task, e.g. ``"2GB"`` (default ``"1GiB"``). Shards
        whose data does not fit a third of it are written in parts by
        several tasks and stamped by a final one.
    progress : bool
        Show a progress bar over shards and bytes.
    compute : bool
        Write now and return the array; with False, return a
        ``dask.delayed.Delayed`` that writes the shards when computed
        (the metadata is written immediately either way).

    Returns
    -------
    zarr.Array or dask.delayed.Delayed
        The written array, opened for reading and writing; or the delayed
        write, which computes to a :class:`~shardpipe.tasks.WriteReport`.

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        On bad arguments, before anything is written.
    shardpipe.errors.ArrayExistsError
        If a node exists at ``path`` and ``overwrite`` is False.
    shardpipe.errors.StoreNotWritableError
        If the store cannot be written.

    Notes
    -----
    ``zarr.json`` is written once, before any shard: a reader that opens the
    array during the write sees a valid array in which every shard is either
    absent (reads as the fill value) or complete. Each shard appears
    atomically (temporary file + rename, or a single PUT / a completed
    multipart upload). If the write fails, shards already published stay,
    and staging files and unfinished multipart uploads are removed (with
    ``compute=False``, call :func:`shardpipe.cleanup` after a failure).
    """
    check_array(arr)
    shard_shape, chunk_shape = resolve_shapes(arr.shape, arr.dtype.itemsize, shards, chunks)
    array = as_dask_array(arr, shard_shape)
    location = check_index_location(index_location)
    check_fill_value(fill_value, array.dtype)
    budget = check_max_mem(max_mem)
    create_kwargs: dict[str, Any] = dict(
        shape=array.shape,
        dtype=array.dtype,
        chunks=chunk_shape,
        shards={"shape": shard_shape, "index_location": location},
        compressors=compressors,
        filters=filters,
        serializer=serializer,
        fill_value=fill_value,
        dimension_names=dimension_names,
        attributes=attributes,
    )
    metadata = build_metadata(**create_kwargs)
    target = resolve_store(store, path, storage_options)
    layout = ShardLayout(tuple(array.shape), shard_shape, chunk_shape)
    plan = _plan(layout, BlockGrid(array.chunks), array.dtype.itemsize, budget, target)
    check_target(target, overwrite)

    zarr.create_array(
        target.zarr_store, name=target.path or None, overwrite=overwrite, **create_kwargs
    )
    token = uuid.uuid4().hex
    write_target = WriteTarget(
        store=target.shards,
        layout=layout,
        codec=ChunkCodec.from_metadata(metadata, write_empty_chunks=write_empty_chunks),
        index_location=location,
        staging=target.key(f"{STAGING_DIR}/{token}"),
    )

    def key_of(coords: tuple[int, ...]) -> str:
        return target.key(metadata.encode_chunk_key(coords))

    # on a local scheduler nothing travels between workers: no piece tasks needed
    in_process = compute and distributed_client() is None
    graph = build_write_graph(array, plan, write_target, key_of, token, in_process=in_process)
    if not compute:
        return graph.result
    try:
        run_publishing(graph.publishing, show=progress)
    except BaseException:
        cleanup_write(target, write_target.staging)
        raise
    target.shards.discard_staging(write_target.staging)
    return zarr.open_array(target.zarr_store, path=target.path, mode="r+")


def _plan(
    layout: ShardLayout, blocks: BlockGrid, itemsize: int, budget: int, target: ResolvedStore
) -> WritePlan:
    try:
        plan = plan_write(layout, blocks, itemsize, budget, max_parts=target.shards.max_parts)
    except PlanError as err:
        raise InvalidArgumentError("max_mem", str(err), "See the message for the fix") from err
    if plan.max_parts_per_shard > 1 and not target.shards.supports_parts:
        raise InvalidArgumentError(
            "max_mem",
            f"shards of {plan.layout.shard_shape} do not fit max_mem={budget} and "
            f"{type(target.shards).__name__} cannot write a shard in parts",
            "Raise max_mem, use smaller shards, or write to a local path or S3",
        )
    return plan


def cleanup_write(target: ResolvedStore, staging: str) -> int:
    """Remove staging data and unfinished uploads left by a failed write."""
    return target.shards.cleanup(staging, target.key("c"))


def cleanup(
    store: Any, path: str | None = None, *, storage_options: dict[str, Any] | None = None
) -> int:
    """Remove what failed or interrupted writes left beside the array at ``path``.

    Staging files and every multipart upload recorded in the array's staging
    area are removed or aborted; published shards are untouched. Use it after
    a ``compute=False`` write whose computation failed (``compute=True``
    writes clean up by themselves), and never while a write to this array is
    running.

    Returns
    -------
    int
        How many leftovers were removed.
    """
    target = resolve_store(store, path, storage_options)
    return cleanup_write(target, target.key(STAGING_DIR))
