"""Sweeps over the shards an array holds: bounded thread pools, or the cluster, with a bar.

``verify``, ``info``, ``compact`` and a resumed write look at every shard
present (found by listing: :mod:`shardpipe.stored.listing`). The work runs
on a thread pool with a bounded number of tasks in flight
(:func:`bounded_map`), so that memory grows with the tasks running, not
with the listing, or on the ``distributed`` cluster when a client is
active; a ``tqdm`` bar counts the shards done.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

from shardpipe.codec.chunk_codec import ChunkCodec
from shardpipe.core.grid import Shape
from shardpipe.engine.progress import bar_class
from shardpipe.engine.scheduler import cluster_threads, distributed_client
from shardpipe.engine.update_tasks import StoredShard, read_shard
from shardpipe.errors import ShardFormatError
from shardpipe.formats.zarr_sharding import ZarrShardingFormat
from shardpipe.internals.zarr_core import ArrayV3Metadata
from shardpipe.storage.resolve import ResolvedStore
from shardpipe.stored.listing import LIST_BATCH, Listed, list_shards
from shardpipe.stored.metadata import format_of, layout_of
from shardpipe.stored.shard_integrity import ShardCheck, ShardChecker


def batches[T](items: Iterable[T], size: int) -> Iterator[list[T]]:
    """``items`` in lists of ``size`` (the last one shorter), taken as they come."""
    it = iter(items)
    while batch := list(itertools.islice(it, size)):
        yield batch


def split(batch: list[Listed], workers: int, most: int) -> list[list[Listed]]:
    """Cut ``batch`` into tasks: at most ``most`` shards each, at least ``workers`` tasks if it can.

    A short listing (an array of a few shards) is spread over every worker;
    a long one goes in tasks of ``most``.
    """
    size = max(1, min(most, -(-len(batch) // max(1, workers))))
    return [batch[i : i + size] for i in range(0, len(batch), size)]


def bounded_map[A, B](
    func: Callable[[A], B], items: Iterable[A], workers: int, window: int | None = None
) -> Iterator[B]:
    """``func`` of every item on ``workers`` threads, results in the order they finish.

    At most ``window`` (default ``2 * workers``) items are submitted and not
    yet collected: ``items`` is consumed only as fast as the pool works, so
    a streamed listing is never held whole. The first exception raised by
    ``func`` is raised here once the tasks already running have ended;
    items not yet started are dropped.
    """
    window = window or 2 * workers
    pending: set[Future[B]] = set()
    with ThreadPoolExecutor(workers) as pool:
        try:
            for item in items:
                pending.add(pool.submit(func, item))
                if len(pending) >= window:
                    done, pending = wait(pending, return_when=FIRST_COMPLETED)
                    yield from (future.result() for future in done)
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                yield from (future.result() for future in done)
        finally:
            for future in pending:
                future.cancel()


TASK_SHARDS = 64
"""Most shards one task checks (a task on the cluster, or on a thread)."""


def over_shards[T](
    target: ResolvedStore,
    shard_format: ZarrShardingFormat,
    grid: Shape,
    task: Callable[[list[Listed]], list[T]],
    *,
    workers: int,
    others: Callable[[Listed], None] | None = None,
    cluster: bool = False,
    progress: bool = False,
    name: str = "shardpipe",
) -> Iterator[T]:
    """Run ``task`` over the shards listed under ``target``, in batches; results as they come.

    Parameters
    ----------
    target : ResolvedStore
        The array.
    shard_format : ZarrShardingFormat
        How its shards are named.
    grid : tuple of int
        Its shard grid.
    task : callable
        Takes a list of listed shards, returns one result per shard (the
        progress bar counts them). Picklable when ``cluster``.
    workers : int
        Threads running tasks when no cluster is used.
    others : callable, optional
        Called (here) with every listed key that is no shard of the grid.
    cluster : bool
        Run the tasks on the ``distributed`` cluster when a client is active
        (:func:`shardpipe.engine.scheduler.distributed_client`).
    progress : bool
        Show a ``tqdm.auto`` bar over the shards; its total is known once
        the listing has ended.
    name : str
        The bar's label, and the name of the tasks on a cluster.

    Yields
    ------
    T
        The results of every task, tasks in the order they finish.
    """
    client = None
    if cluster:
        client = distributed_client()
        workers = (cluster_threads() or workers) if client is not None else workers
    # delay: no bar of unknown length while the listing is quick; it is drawn with its
    # total once the listing has ended
    with bar_class()(
        total=None, unit="shard", desc=name, disable=not progress, dynamic_ncols=True, delay=2
    ) as bar:
        listed = [0]

        def shards() -> Iterator[Listed]:
            for item in list_shards(target, shard_format, grid):
                if item.coords is not None:
                    listed[0] += 1
                    yield item
                elif others is not None:
                    others(item)
            bar.total = listed[0]
            bar.delay = 0  # drawn from now on, and once more on closing
            bar.refresh()

        tasks = (
            part
            for batch in batches(shards(), LIST_BATCH)
            for part in split(batch, workers, TASK_SHARDS)
        )
        if client is None:
            results = bounded_map(task, tasks, workers)
        else:
            results = _on_cluster(client, task, tasks, 2 * workers, name)
        for result in results:
            if bar.total is not None and bar.n + len(result) >= bar.total:
                bar.n += len(result)  # the last: drawn once, on closing
            else:
                bar.update(len(result))
            yield from result


def _on_cluster[T](
    client: Any,
    task: Callable[[list[Listed]], list[T]],
    tasks: Iterable[list[Listed]],
    window: int,
    name: str,
) -> Iterator[list[T]]:
    """``task`` of each batch of ``tasks`` on a ``distributed`` cluster, at most ``window`` at once.

    Tasks not yet finished when this stops (the caller stopped, or a task
    failed) are cancelled.
    """
    from distributed import as_completed

    token = uuid.uuid4().hex[:12]
    running = as_completed(with_results=True)
    submitted: list[Any] = []
    try:
        for i, batch in enumerate(tasks):
            future = client.submit(task, batch, key=f"{name}-{token}-{i}", pure=False)
            submitted.append(future)
            running.add(future)
            if running.count() >= window:
                yield next(running)[1]
                submitted = [f for f in submitted if f.status == "pending"]
        for _, result in running:
            yield result
    finally:
        pending = [f for f in submitted if f.status == "pending"]
        if pending:
            client.cancel(pending)


def checked_shards(
    target: ResolvedStore,
    metadata: ArrayV3Metadata,
    workers: int,
    *,
    decode: bool = True,
    cluster: bool = False,
    progress: bool = False,
    others: Callable[[Listed], None] | None = None,
    shard_format: ZarrShardingFormat | None = None,
) -> Iterator[ShardCheck]:
    """Check every shard present (found by listing), as the checks finish (not in grid order).

    Keys under the shard prefix that are no shard of the grid go to
    ``others``. See :func:`over_shards` for
    ``workers``, ``cluster`` and ``progress``. ``shard_format`` replaces the
    format ``metadata`` gives (a draft array's shards: see
    :mod:`shardpipe.legacy.hierarchy`).
    """
    layout = layout_of(metadata)
    shard_format = format_of(metadata) if shard_format is None else shard_format
    checker = ShardChecker(
        target.shards, layout, ChunkCodec.from_metadata(metadata), shard_format, decode
    )
    return over_shards(
        target,
        shard_format,
        layout.shard_grid,
        checker,
        workers=workers,
        others=others,
        cluster=cluster,
        progress=progress,
        name="shardpipe-verify",
    )


def over_stored_shards[T](
    target: ResolvedStore,
    metadata: Any,
    workers: int,
    func: Callable[[StoredShard], T],
    others: Callable[[Listed], None] | None = None,
    *,
    shard_format: ZarrShardingFormat | None = None,
    progress: bool = False,
    name: str = "shardpipe",
    unreadable: Callable[[Listed, ShardFormatError], T] | None = None,
) -> Iterator[T]:
    """Apply ``func`` to every shard present (found by listing), ``workers`` at a time.

    Keys under the shard prefix that name no shard of the grid are skipped
    (given to ``others``); a shard deleted since it was listed is skipped.
    ``shard_format`` replaces the format ``metadata`` gives (a draft array's).
    ``progress`` shows a bar labelled ``name`` over the shards. A shard whose
    index does not follow the format raises its
    :class:`~shardpipe.errors.ShardFormatError`, or, with ``unreadable``,
    gives ``unreadable(listed, error)`` as its result (called on the
    worker's thread).
    """
    shard_format = format_of(metadata) if shard_format is None else shard_format

    def task(batch: list[Listed]) -> list[T | None]:
        results: list[T | None] = []
        for item in batch:
            assert item.coords is not None  # over_shards hands on only the grid's shards
            try:
                stored = read_shard(target.shards, shard_format, item.key, shard=item.coords)
            except ShardFormatError as err:
                if unreadable is None:
                    raise
                results.append(unreadable(item, err))
                continue
            results.append(None if stored is None else func(stored))
        return results

    grid = layout_of(metadata).shard_grid
    for result in over_shards(
        target,
        shard_format,
        grid,
        task,
        workers=workers,
        others=others,
        progress=progress,
        name=name,
    ):
        if result is not None:
            yield result
