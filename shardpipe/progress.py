"""Run a write's publishing tasks and show progress over shards and bytes.

On a ``distributed`` client the shards are submitted as futures and the bar
advances as each completes; on Dask's local schedulers a scheduler callback
does the same. The bar is ``tqdm.auto``: a console bar in a terminal, a
widget in a notebook.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import dask
import dask.base
import dask.threaded
from dask.base import compute
from dask.callbacks import Callback
from dask.delayed import Delayed
from dask.system import CPU_COUNT

from shardpipe.graph import PUBLISHING_TASKS
from shardpipe.tasks import WriteReport


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


def _bar(total: int, show: bool) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="shard", desc="shardpipe", disable=not show, dynamic_ncols=True)


def _advance(bar: Any, report: WriteReport, done: list[int]) -> None:
    done[0] += report.nbytes
    bar.update(report.shards)
    bar.set_postfix_str(f"{done[0] / 1e6:,.0f} MB written", refresh=False)


class _LocalProgress(Callback):
    def __init__(self, bar: Any) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.bar = bar
        self.done = [0]

    def _posttask(self, key: Any, result: Any, dsk: Any, state: Any, worker_id: Any) -> None:
        name = key[0] if isinstance(key, tuple) else str(key)
        if isinstance(result, WriteReport) and name.startswith(PUBLISHING_TASKS):
            _advance(self.bar, result, self.done)


def run_publishing(
    tasks: Sequence[Delayed], *, show: bool, token: str, shards: int | None = None
) -> list[WriteReport]:
    """Compute every publishing task and return their reports, in order.

    ``shards`` is the number of shards the tasks write (the bar's total;
    by default one per task).

    If a task fails, no task of the write (``token`` is in every task's
    name) is still running when this raises: tasks not started are cancelled
    and running ones are waited for, so that the caller can roll back and
    clean up without a task writing under it.
    """
    client = distributed_client()
    with _bar(len(tasks) if shards is None else shards, show) as bar:
        if client is not None:
            return _run_on_cluster(client, tasks, bar, token)
        if dask.base.get_scheduler() is not dask.threaded.get:
            with _LocalProgress(bar):
                return list(compute(*tasks))
        workers = dask.config.get("num_workers", None) or CPU_COUNT
        pool = ThreadPoolExecutor(workers)
        try:
            with _LocalProgress(bar):
                return list(compute(*tasks, scheduler="threads", pool=pool))
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


GATHER_EVERY = 0.5
"""Seconds between two collections of finished shards' reports on ``distributed``."""


def _run_on_cluster(
    client: Any, tasks: Sequence[Delayed], bar: Any, token: str
) -> list[WriteReport]:
    """Compute ``tasks`` on a ``distributed`` client, their reports in order.

    Reports are collected from the workers in batches, at most every
    :data:`GATHER_EVERY` seconds, at the end and at the first failure: one
    request per worker and batch instead of one per task, each of which
    costs the client's, the scheduler's and a worker's event loops time
    taken from the workers on a small machine. The bar advances as reports
    arrive.
    """
    from distributed import as_completed

    futures = client.compute(list(tasks))
    position = {f.key: i for i, f in enumerate(futures)}
    reports: list[WriteReport | None] = [None] * len(futures)
    pending: list[Any] = []
    done = [0]

    def collect() -> None:
        for future, report in zip(pending, client.gather(pending), strict=True):
            reports[position[future.key]] = report
            _advance(bar, report, done)
        pending.clear()

    gathered = time.monotonic()
    try:
        finished = as_completed(futures)
        for batch in finished.batches():
            pending.extend(batch)
            failed = any(f.status != "finished" for f in batch)
            if failed or finished.is_empty() or time.monotonic() - gathered >= GATHER_EVERY:
                collect()
                gathered = time.monotonic()
        if pending:
            collect()
    except BaseException:
        client.cancel(futures)
        _wait_idle(client, token)
        raise
    return [r for r in reports if r is not None]


def _wait_idle(client: Any, token: str, timeout: float = 600.0) -> None:
    """Wait until no task whose name holds ``token`` runs on the cluster's workers."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        running = client.processing()
        if not any(token in str(key) for keys in running.values() for key in keys):
            return
        time.sleep(0.05)
