"""Where a computation runs: this process's threads, worker processes, or a cluster.

A write that runs on Dask's threaded or synchronous scheduler keeps its
blocks in this process (:func:`runs_in_process`); on a ``distributed``
client (:func:`distributed_client`) tasks run in workers, which may be
other processes: a store in this process's memory is refused there
(:func:`check_store_reachable`), and a failed write waits for the tasks
still running before it cleans up (:func:`wait_idle`, :func:`compute_settled`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import dask
import dask.array as da
import dask.base
from dask.threaded import ContextAwareThreadPoolExecutor
from zarr.storage import MemoryStore

from shardpipe.errors import InvalidArgumentError
from shardpipe.storage.resolve import ResolvedStore
from shardpipe.stored.locations import resolved_name


def distributed_client() -> Any | None:
    """The ``distributed`` client computations would run on now, if any."""
    if dask.config.get("scheduler", None) not in (None, "dask.distributed", "distributed"):
        return None
    try:
        from distributed import get_client

        return get_client()
    except (ImportError, ValueError):
        return None


def cluster_threads() -> int | None:
    """Worker threads of the ``distributed`` cluster computations would run on now, if any."""
    client = distributed_client()
    if client is None:
        return None
    return sum(client.nthreads().values()) or None


def runs_in_process(collection: Any) -> bool:
    """Whether ``collection`` would be computed now by a scheduler in this process.

    True for Dask's threaded and synchronous schedulers, where blocks do not
    travel between processes; False for ``distributed`` and for the
    multiprocessing scheduler (``scheduler="processes"``).
    """
    import dask.local
    import dask.threaded

    if distributed_client() is not None:
        return False
    scheduler = dask.base.get_scheduler(collections=[collection])
    return scheduler in (dask.threaded.get, dask.local.get_sync)


def check_store_reachable(arr: da.Array, target: ResolvedStore) -> None:
    """Refuse a zarr ``MemoryStore`` that worker processes would write copies of.

    A ``MemoryStore`` lives in this process's memory. Tasks running in other
    processes (a distributed cluster with worker processes) would write into
    their own unpickled copies, and the data would be lost without an error.
    """
    if not isinstance(target.zarr_store, MemoryStore) or runs_in_process(arr):
        return
    client = distributed_client()
    if client is None:
        return
    here = os.getpid()
    if all(pid == here for pid in client.run(os.getpid).values()):
        return  # workers are threads of this process
    raise InvalidArgumentError(
        "store",
        f"{resolved_name(target)} lives in this process's memory, but the active "
        "distributed client runs tasks in worker processes, which would write into their own "
        "copies (the data would be lost)",
        "Write to a local path or S3, or compute with dask.config.set(scheduler='threads')",
    )


def compute_settled(
    collections: Sequence[Any],
    tokens: Sequence[str],
    each_done: Callable[[], None] | None = None,
    **kwargs: Any,
) -> None:
    """Compute ``collections`` for what their tasks write; if one fails, none still runs.

    Dask's schedulers raise at the first failure (or interrupt) while other
    tasks still run, in this process's threads or on a cluster's workers: a
    caller that then removes what those tasks write would race them, and they
    would write into it again. Here, on Dask's threaded scheduler the tasks run
    on a pool of this call's own, shut down (its queued tasks cancelled, its
    running ones waited for) before the error is raised; on a ``distributed``
    client the futures are cancelled and :func:`wait_idle` waits until no task
    whose name holds one of ``tokens`` runs. The synchronous scheduler runs one task at
    a time and the multiprocessing one is left as Dask runs it.

    Parameters
    ----------
    collections : sequence
        Dask collections (Delayed objects, arrays) to compute; results dropped.
    tokens : sequence of str
        Parts of task names: every task that writes has one in its name (for
        :func:`wait_idle`).
    each_done : callable, optional
        On a ``distributed`` client, called as each collection's result
        arrives (progress; local schedulers have Dask's callbacks for that).
    **kwargs
        Passed on to ``compute`` (``optimize_graph``).
    """
    import dask.threaded
    from dask.system import CPU_COUNT

    client = distributed_client()
    if client is not None:
        from distributed import as_completed

        futures = client.compute(list(collections), **kwargs)
        try:
            for future in as_completed(futures):
                future.result()  # raises the task's error
                if each_done is not None:
                    each_done()
        except BaseException:
            client.cancel(futures)
            wait_idle(client, tokens)
            raise
        return
    if dask.base.get_scheduler(collections=list(collections)) is not dask.threaded.get:
        dask.base.compute(*collections, **kwargs)
        return
    workers = dask.config.get("num_workers", None) or CPU_COUNT
    # as Dask's own pool: the tasks see the caller's context variables (the command
    # line's wording of messages, shardpipe.advice)
    pool = ContextAwareThreadPoolExecutor(workers, thread_name_prefix="shardpipe-copy")
    failed = True
    try:
        dask.base.compute(*collections, scheduler="threads", pool=pool, **kwargs)
        failed = False
    finally:
        pool.shutdown(wait=True, cancel_futures=failed)


def wait_idle(client: Any, token: str | Sequence[str], timeout: float = 600.0) -> None:
    """Wait until no task whose name holds ``token`` (or one of them) runs on the workers.

    Asks the workers, not the scheduler: a task whose future was cancelled
    is forgotten by the scheduler at once but keeps running in its worker's
    thread until it returns, and may still be writing.
    """
    tokens = (token,) if isinstance(token, str) else tuple(token)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        running = client.run(_running_keys)
        if not any(t in key for keys in running.values() for key in keys for t in tokens):
            return
        time.sleep(0.05)


def _running_keys(dask_worker: Any) -> list[str]:
    """Keys of the tasks running in ``dask_worker``'s threads, cancelled ones included."""
    state = dask_worker.state
    return [str(ts.key) for ts in (*state.executing, *state.long_running)]
