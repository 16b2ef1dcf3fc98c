"""The progress bar of a write, over shards, bytes and waves.

On a ``distributed`` client the bar advances as reports are gathered
(:mod:`shardpipe.engine.streaming`); on Dask's local schedulers a scheduler
callback advances it as publishing tasks end.
"""

from __future__ import annotations

import threading
from typing import Any

from dask.callbacks import Callback

from shardpipe.engine.graph import PUBLISHING_TASKS
from shardpipe.engine.reports import WriteReport


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
