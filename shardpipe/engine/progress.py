"""Where a write runs, and its progress bar over shards, bytes and waves.

On a ``distributed`` client the bar advances as reports are gathered
(:mod:`shardpipe.engine.streaming`); on Dask's local schedulers a scheduler
callback advances it as publishing tasks end.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import dask
import dask.base
from dask.callbacks import Callback

from shardpipe.engine.graph import PUBLISHING_TASKS
from shardpipe.engine.reports import WriteReport


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


class ShardBar:
    """A progress bar over the shards of a write, with bytes, waves and an ETA.

    ``tqdm.auto``: a console bar in a terminal, a widget in a notebook;
    nothing when ``show`` is False. Safe to advance from several threads.

    Parameters
    ----------
    total_shards : int
        Shards the write publishes (the bar's total).
    total_waves : int
        Waves the write is run in (shown when more than one).
    show : bool
        Whether to show it.
    """

    def __init__(self, total_shards: int, total_waves: int, show: bool) -> None:
        from tqdm.auto import tqdm

        self._bar = tqdm(
            total=total_shards,
            unit="shard",
            desc="shardpipe",
            disable=not show,
            dynamic_ncols=True,
        )
        self._lock = threading.Lock()
        self._nbytes = 0
        self._waves = 0
        self._total_waves = total_waves

    def advance(self, report: WriteReport) -> None:
        """Count a publishing task's shards and bytes."""
        with self._lock:
            self._nbytes += report.nbytes
            self._bar.update(report.shards)
            self._bar.set_postfix_str(self._postfix(), refresh=False)

    def wave_done(self) -> None:
        """Count a finished wave."""
        with self._lock:
            self._waves += 1
            self._bar.set_postfix_str(self._postfix(), refresh=False)

    def _postfix(self) -> str:
        text = f"{self._nbytes / 1e6:,.0f} MB written"
        if self._total_waves > 1:
            text = f"wave {min(self._waves + 1, self._total_waves)}/{self._total_waves}, " + text
        return text

    def __enter__(self) -> ShardBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self._bar.close()


class _LocalProgress(Callback):
    def __init__(self, bar: ShardBar) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.bar = bar

    def _posttask(self, key: Any, result: Any, dsk: Any, state: Any, worker_id: Any) -> None:
        name = key[0] if isinstance(key, tuple) else str(key)
        if isinstance(result, WriteReport) and name.startswith(PUBLISHING_TASKS):
            self.bar.advance(result)


def local_progress(bar: ShardBar) -> Callback:
    """A Dask callback advancing ``bar`` as publishing tasks end on a local scheduler.

    Use it as a context manager around the ``compute`` calls (callbacks are
    process-wide: computations in other threads advance the bar too).
    """
    return _LocalProgress(bar)


def wait_idle(client: Any, token: str, timeout: float = 600.0) -> None:
    """Wait until no task whose name holds ``token`` runs on the cluster's workers.

    Asks the workers, not the scheduler: a task whose future was cancelled
    is forgotten by the scheduler at once but keeps running in its worker's
    thread until it returns, and may still be writing.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        running = client.run(_running_keys)
        if not any(token in key for keys in running.values() for key in keys):
            return
        time.sleep(0.05)


def _running_keys(dask_worker: Any) -> list[str]:
    """Keys of the tasks running in ``dask_worker``'s threads, cancelled ones included."""
    state = dask_worker.state
    return [str(ts.key) for ts in (*state.executing, *state.long_running)]
