"""``to_sharded_zarr`` and ``cleanup``: the one-call front-ends over :mod:`shardpipe.write.job`.

Into a writable Icechunk ``Session`` a write leaves its changes in the session
(see :mod:`shardpipe.storage.icechunk.store`); with ``commit="message"`` the
runner commits them at the end and reports the snapshot id
(:func:`~shardpipe.write.job.run_jobs`, the one commit bracket), and with
``rebase=True`` as well, commits that reached the branch meanwhile are rebased
onto when they changed no shard this write changed. What the front doors still
return with ``commit=`` is :func:`snapshot_id_returned`.
"""

from __future__ import annotations

import warnings
from typing import Any, Unpack

import zarr
from dask.delayed import Delayed

from shardpipe.core.checks import check_progress
from shardpipe.core.memory import DEFAULT_MAX_MEM
from shardpipe.errors import InvalidArgumentError
from shardpipe.journal.array_lock import holding
from shardpipe.journal.markers import JobKeys
from shardpipe.storage.keys import JOB_DIR, STAGING_DIR
from shardpipe.storage.resolve import resolve_store
from shardpipe.stored.places import check_not_a_file
from shardpipe.write.arguments import check_run
from shardpipe.write.job import RunOptions, run_checked_job
from shardpipe.write.options import ARRAY_PARAMETERS, STORED_PARAMETERS, WriteOptions
from shardpipe.write.parameters import shares_parameters
from shardpipe.write.prepare import prepare_write

__all__ = ["DEFAULT_MAX_MEM", "cleanup", "snapshot_id_returned", "to_sharded_zarr"]


@shares_parameters(ARRAY_PARAMETERS)
def to_sharded_zarr(
    arr: Any,
    store: Any,
    *,
    progress: bool = False,
    compute: bool = True,
    commit: str | None = None,
    rebase: bool = False,
    **options: Unpack[WriteOptions],
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

    Returns
    -------
    zarr.Array or dask.delayed.Delayed
        The written array, opened for reading and writing. With
        ``compute=False``, Dask's convention: the delayed write, which
        computes to a :class:`~shardpipe.WriteReport`. Deprecated: with
        ``commit``, the id of the Icechunk snapshot committed, with a
        ``FutureWarning`` (from 0.3: the array, as without ``commit``; the
        id is on the report of ``prepare_write(...).execute(commit=...)``).

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
    job = prepare_write(arr, store, **options)
    run = RunOptions(progress, *check_run(commit, rebase, job.target))
    if not compute:
        return job.to_delayed()
    report = run_checked_job(job, run)
    if report.snapshot_id is not None:
        return snapshot_id_returned(
            "to_sharded_zarr", "shardpipe.prepare_write", report.snapshot_id
        )
    return job.open()


@shares_parameters(STORED_PARAMETERS)
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

    Parameters
    ----------

    Returns
    -------
    int
        How many leftovers were removed.
    """
    target = resolve_store(store, path, storage_options)
    check_not_a_file(target, "store")
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


def snapshot_id_returned(function: str, planned: str, snapshot_id: str) -> str:
    """The snapshot id ``function(commit=...)`` still returns, with a ``FutureWarning``.

    Returning the id with ``commit`` and the array without made the return
    type depend on an argument (issue 32). From shardpipe 0.3 ``function``
    returns the written array in both cases; the id is the ``snapshot_id``
    of the report that ``planned(...).execute(commit=...)`` returns.
    """
    warnings.warn(
        f"{function}(commit=...) returns the Icechunk snapshot id in shardpipe 0.2 and will "
        f"return the written array from 0.3, as without commit. For the id, call "
        f"{planned}(...).execute(commit=...): its report's snapshot_id",
        FutureWarning,
        stacklevel=4,  # the caller of the public function (through its parameter wrapper)
    )
    return snapshot_id
