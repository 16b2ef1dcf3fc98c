"""The progress bar of a write, over shards, bytes and waves.

On a ``distributed`` client the bar advances as reports are gathered
(:mod:`shardpipe.engine.streaming`); on Dask's local schedulers a scheduler
callback advances it as publishing tasks end.
"""

from __future__ import annotations

import functools
import importlib.util
import threading
from typing import Any

from dask.callbacks import Callback

from shardpipe.engine.graph import PUBLISHING_TASKS
from shardpipe.engine.reports import WriteReport


@functools.cache
def bar_class() -> Any:
    """The ``tqdm`` class every bar of shardpipe is drawn with.

    ``tqdm.auto`` (a widget in a notebook) when ``ipywidgets`` can be
    imported; else the console bar, which is what ``tqdm.auto`` would fall
    back to in a notebook without widgets, after a ``TqdmWarning``. Looked
    up once per process (the search of the import path costs a fraction
    of a millisecond, for every write).
    """
    if importlib.util.find_spec("ipywidgets") is not None:
        from tqdm.auto import tqdm as with_widgets

        return with_widgets
    from tqdm.std import tqdm as console

    return console


class ShardBar:
    """A progress bar over the shards of a write, with bytes, waves and an ETA.

    Drawn with :func:`bar_class`: a console bar in a terminal, a widget in a
    notebook that has ipywidgets; nothing when ``show`` is False. Safe to
    advance from several threads. The last advance is left for leaving the ``with`` block
    to draw, so the finished bar is printed once.

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
        self._bar = bar_class()(
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

    def advance(self, report: WriteReport, shards: int | None = None) -> None:
        """Count a publishing task's bytes and shards (``shards``, else the report's)."""
        count = report.shards if shards is None else shards
        with self._lock:
            self._nbytes += report.nbytes
            self._bar.set_postfix_str(self._postfix(), refresh=False)
            if self._bar.total is not None and self._bar.n + count >= self._bar.total:
                self._bar.n += count  # the last: drawn once, on closing
            else:
                self._bar.update(count)

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
    def __init__(self, bar: ShardBar, publishing: tuple[str, ...], per_task: bool) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.bar = bar
        self.publishing = publishing
        self.per_task = per_task

    def _posttask(self, key: Any, result: Any, dsk: Any, state: Any, worker_id: Any) -> None:
        name = key[0] if isinstance(key, tuple) else str(key)
        if isinstance(result, WriteReport) and name.startswith(self.publishing):
            self.bar.advance(result, 1 if self.per_task else None)


def local_progress(
    bar: ShardBar, publishing: tuple[str, ...] = PUBLISHING_TASKS, *, per_task: bool = False
) -> Callback:
    """A Dask callback advancing ``bar`` as publishing tasks end on a local scheduler.

    Use it as a context manager around the ``compute`` calls (callbacks are
    process-wide: computations in other threads advance the bar too).

    Parameters
    ----------
    bar : ShardBar
        The bar.
    publishing : tuple of str
        Prefixes of the names of the tasks that publish shards.
    per_task : bool
        Count one shard per publishing task (its report may count none: an
        empty shard), rather than the shards its report counts.
    """
    return _LocalProgress(bar, publishing, per_task)
