"""``to_sharded_zarr`` and ``cleanup``: the one-call front-ends over :mod:`shardpipe.write.job`."""

from __future__ import annotations

from typing import Any

import zarr
from dask.delayed import Delayed

from shardpipe.core.checks import check_progress
from shardpipe.core.memory import DEFAULT_MAX_MEM
from shardpipe.errors import InvalidArgumentError
from shardpipe.journal.array_lock import holding
from shardpipe.journal.markers import JobKeys
from shardpipe.storage.keys import JOB_DIR, STAGING_DIR
from shardpipe.storage.resolve import resolve_store
from shardpipe.write.prepare import prepare_write
from shardpipe.write.transaction import check_commit

__all__ = ["DEFAULT_MAX_MEM", "cleanup", "to_sharded_zarr"]


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
    index_location: str | None = None,
    dimension_names: Any = None,
    attributes: dict[str, Any] | None = None,
    overwrite: bool = False,
    storage_options: dict[str, Any] | None = None,
    write_empty_chunks: bool = False,
    max_mem: int | str = DEFAULT_MAX_MEM,
    region: Any = None,
    append_dim: int | None = None,
    write_strategy: str = "auto",
    chunk_checksums: bool = True,
    resume: bool | str = False,
    progress: bool = False,
    compute: bool = True,
    commit: str | None = None,
    rebase: bool = False,
) -> zarr.Array[Any] | Delayed | str:
    """Write a Dask array to a Zarr v3 array sharded with ``sharding_indexed``.

    Every shard object has exactly one writing task; no locks are taken.
    Dask blocks may have any chunking: blocks holding whole shards write
    them directly, other blocks encode the inner chunks they hold where they
    live and send only encoded bytes (plus the bits of inner chunks that
    straddle block edges) to the one task that assembles each shard.

    This is ``prepare_write(...).execute(progress=progress)`` (or
    ``.to_delayed()``): use :func:`~shardpipe.prepare_write` to see the plan
    first or to get the :class:`~shardpipe.WriteReport`.

    Parameters
    ----------
    arr : dask.array.Array or numpy.ndarray
        The data. A NumPy array is wrapped in blocks of one shard.
    store : str, os.PathLike, zarr Store, zarr Group or icechunk.Session
        Where to write: a local path, an fsspec URL (``"s3://bucket/x.zarr"``),
        a zarr ``Store``, a ``Group`` (the array goes at ``path`` in it), or a
        writable Icechunk ``Session`` (or its ``IcechunkStore``): every shard
        is then written by one task through a fork of the session, the forks
        are merged back in a tree, and the session holds the changes (see
        ``commit``). Region writes and appends rewrite whole shards inside
        the transaction.
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
    index_location : {"end", "start"}, optional
        Where each shard's index goes (default ``"end"``).
    dimension_names : sequence of str, optional
        Names of the dimensions, stored in the metadata.
    attributes : dict, optional
        User attributes stored in the metadata (JSON-serialisable).
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
        that do not fit are written in parts by several tasks and stamped by
        a final one; a plan in which some task cannot fit is refused.
    region : tuple of slice, optional
        Write into this box of the existing array at ``path`` (one slice per
        dimension; the box's shape is the source's). Every other byte of the
        array is kept: inner chunks the box covers partly are read, merged
        and re-encoded; untouched ones are never decoded.
    append_dim : int, optional
        Grow the existing array along this axis by the source's length and
        write the source at the new end. The new shape is published after
        every shard: readers see the old array until then.
    write_strategy : {"auto", "in_place", "append", "rewrite"}
        How region writes and appends change existing shards: ``"in_place"``
        overwrites inner chunks where their new encoding fits (file systems),
        ``"append"`` adds new chunks and a new index at the end of the shard
        (file systems; S3 composes the new object server side), ``"rewrite"``
        rebuilds the shard compactly. ``"auto"`` chooses per shard
        (:func:`shardpipe.core.shard_update.choose_strategy`). Layout and
        codec arguments, left out, are the existing array's; given, they must
        match it.
    chunk_checksums : bool
        End the inner codec chain of a new array with zarr's ``crc32c``
        codec (default True), so that every reader (zarr-python, tensorstore,
        zarrs) and :func:`~shardpipe.verify` refuse an inner chunk whose
        bytes changed; it costs 4 bytes per chunk. Compressors that already
        check their chunks (a ``crc32c`` among them, or a final ``zstd`` with
        ``checksum=True``) are kept as given: never two checksums. False
        writes the chain exactly as given (or zarr's default). Region writes
        and appends keep the existing array's chain.
    resume : bool or "force"
        Carry on an interrupted write of a new array: shards it published
        (present, index and CRC32C valid) are kept and only the rest are
        written. The array must have been made by the same write, which its
        job record (``.shardpipe/write.json``) shows: same source (its Dask
        name), same metadata. ``"force"`` skips the source comparison (for
        sources whose Dask name is not deterministic). Without an array at
        the target, the write starts afresh. See :mod:`shardpipe.write.resume`.
    progress : bool
        Show a progress bar over shards and bytes (with ``compute=True``).
    compute : bool
        Write now and return the array; with False, return a
        ``dask.delayed.Delayed`` that writes the metadata and then the shards
        when computed (not into an Icechunk session).
    commit : str, optional
        Into an Icechunk session: commit it with this message once every
        shard is written, and return the new snapshot's id.
    rebase : bool
        With ``commit``: if other sessions committed to the branch meanwhile,
        rebase onto their commits when none changed a shard this write
        changed (else :class:`~shardpipe.errors.TransactionConflictError`,
        naming the array and the shards; nothing is committed).

    Returns
    -------
    zarr.Array or dask.delayed.Delayed or str
        The written array, opened for reading and writing; or the delayed
        write, which computes to a :class:`~shardpipe.WriteReport`; or, with
        ``commit``, the id of the Icechunk snapshot committed.

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        On bad arguments, before anything is written.
    shardpipe.errors.MemoryBudgetError
        If a task of the plan cannot fit ``max_mem`` (also an
        ``InvalidArgumentError`` for ``max_mem``).
    shardpipe.errors.SourceOverlapsTargetError
        If the target is (or contains, or lies inside) a zarr array the
        Dask array reads.
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
    progress, compute = check_progress(progress, compute, planned="shardpipe.prepare_write")
    job = prepare_write(
        arr,
        store,
        path=path,
        shards=shards,
        chunks=chunks,
        compressors=compressors,
        filters=filters,
        serializer=serializer,
        fill_value=fill_value,
        index_location=index_location,
        dimension_names=dimension_names,
        attributes=attributes,
        overwrite=overwrite,
        storage_options=storage_options,
        write_empty_chunks=write_empty_chunks,
        max_mem=max_mem,
        region=region,
        append_dim=append_dim,
        write_strategy=write_strategy,
        chunk_checksums=chunk_checksums,
        resume=resume,
    )
    check_commit(commit, rebase, job.target)
    if not compute:
        return job.to_delayed()
    report = job.execute(progress=progress, commit=commit, rebase=rebase)
    if report.snapshot_id is not None:
        return report.snapshot_id
    return job.open()


def cleanup(
    store: Any, path: str | None = None, *, storage_options: dict[str, Any] | None = None
) -> int:
    """Remove what failed or interrupted writes left beside the array at ``path``.

    Staging files and every multipart upload recorded in the array's staging
    area are removed or aborted, and temporary files of processes that no
    longer run; published shards are untouched, except that a shard left
    mid-update by a job that no longer runs is rolled back to its old bytes
    (as the next write would). Use it after a ``compute=False`` write whose
    computation failed (``compute=True`` writes clean up by themselves). It
    holds the array while it works, so it refuses to run while another job
    holds it (see :func:`shardpipe.repair`).

    Returns
    -------
    int
        How many leftovers were removed.
    """
    target = resolve_store(store, path, storage_options)
    has_records = next(iter(target.shards.list(target.key(f"{JOB_DIR}/"))), None) is not None
    if not has_records and target.shards.get(target.key("zarr.json")) is None:
        where = f"{store}" + (f" (path {path!r})" if path else "")
        raise InvalidArgumentError(
            "store",
            f"there is no array and no shardpipe record at {where}, so nothing to clean up",
            "Check the store and path: they must name the array the failed write wrote",
        )
    with holding(target.shards, JobKeys(target.key("")), "clean up"):
        return target.shards.cleanup(target.key(STAGING_DIR), target.key("c"))
