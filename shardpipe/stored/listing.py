"""The shards present in an array, from a listing of its shard keys: never a walk of its grid.

A grid may hold far more shards than are stored (a sparse array, an array
being written, a ``zarr.json`` declaring a shape of ``2**40`` along each
axis), so the commands that look at shards (``verify``, ``info``,
``compact``, a resumed write) list the keys under the array's shard prefix
(:func:`shard_prefix`) and read each back into shard coordinates with the
shard format (:meth:`~shardpipe.formats.zarr_sharding.ZarrShardingFormat.coords`).
The shards absent are counted, ``n_shards - present``, never enumerated.

Each listed key is a :class:`Listed`: a shard of the grid, a temporary file
a write left beside the shard it was to become (``*.shardpipe-tmp`` on a
file system, which ``cleanup`` removes), or a key that is no shard of the
grid (another naming, a position past the grid's end, a stray file):
``verify`` reports the last kind as a problem, the others skip it.

Work on the listed shards runs on a thread pool with a bounded number of
tasks in flight (:func:`bounded_map`), so that memory grows with the tasks
running, not with the listing.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any, NamedTuple

from shardpipe.core.grid import Coords, Shape
from shardpipe.formats.zarr_sharding import ZarrShardingFormat
from shardpipe.storage.keys import JOB_DIR, TEMPORARY_SUFFIX
from shardpipe.storage.resolve import ResolvedStore

LIST_BATCH = 1024
"""Listed keys taken at a time before they are handed out as tasks."""


class Listed(NamedTuple):
    """One key listed under an array's shard prefix.

    Attributes
    ----------
    key : str
        The store key.
    coords : tuple of int or None
        The shard's grid coordinates; None when the key is no shard of the grid.
    temporary : bool
        A temporary file an unfinished write left (``coords`` is None).
    """

    key: str
    coords: Coords | None
    temporary: bool = False


def shard_prefix(target: ResolvedStore, shard_format: ZarrShardingFormat) -> str:
    """The key prefix under which every shard of the array at ``target`` lies.

    ``<array>/c/`` or ``<array>/c.`` for the "default" chunk key encoding;
    the array's own prefix for "v2" (whose keys ``0.1.2`` lie beside
    ``zarr.json``); the one key ``<array>/c`` of a 0-dimensional array.
    """
    if not shard_format.chunks_per_shard:
        return target.key(shard_format.key(()))
    head = shard_format.key_head
    return target.key("") if head is None else target.key(head)


def list_shards(
    target: ResolvedStore, shard_format: ZarrShardingFormat, grid: Shape
) -> Iterator[Listed]:
    """Every key under the shard prefix of the array at ``target``, as the listing streams it.

    With the "v2" key encoding the prefix is the array's folder: its
    ``zarr.json`` and shardpipe's records (``.shardpipe/``) are left out.
    """
    base = target.key("")
    prefix = shard_prefix(target, shard_format)
    for key in target.shards.list(prefix):
        relative = key[len(base) :]
        if shard_format.key_prefix is None and (
            relative == "zarr.json" or relative.startswith(f"{JOB_DIR}/")
        ):
            continue
        coords = shard_format.coords(relative, grid)
        yield Listed(key, coords, coords is None and key.endswith(TEMPORARY_SUFFIX))


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
        (:func:`shardpipe.engine.progress.distributed_client`).
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
    from tqdm.auto import tqdm

    client = None
    if cluster:
        from shardpipe.engine.progress import cluster_threads, distributed_client

        client = distributed_client()
        workers = (cluster_threads() or workers) if client is not None else workers
    with tqdm(total=None, unit="shard", desc=name, disable=not progress, dynamic_ncols=True) as bar:
        listed = [0]

        def shards() -> Iterator[Listed]:
            for item in list_shards(target, shard_format, grid):
                if item.coords is not None:
                    listed[0] += 1
                    yield item
                elif others is not None:
                    others(item)
            bar.total = listed[0]
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
