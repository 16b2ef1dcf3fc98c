"""The progress bar of a write, over shards, bytes and waves, and one bar across passes.

On a ``distributed`` client the bar advances as reports are gathered
(:mod:`shardpipe.engine.streaming`); on Dask's local schedulers a scheduler
callback advances it as publishing tasks end.

A job of several passes (a two-pass rechunk) draws one :class:`PassesBar`
whose total counts the steps of every pass (the blocks the copy stores,
then the shards of the write) and whose description says which pass runs.
While the job's last pass is :meth:`~PassesBar.carried`, the
:class:`ShardBar` of its write advances that bar instead of drawing its own.
"""

from __future__ import annotations

import functools
import importlib.util
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
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


class PassesBar:
    """One progress bar across the passes of a job: the steps of each, in order.

    Its total is the steps of every pass (blocks copied, shards written);
    its description says which pass runs (``"pass 1 of 2: copy"``). Drawn
    with :func:`bar_class`; nothing when ``show`` is False.

    Parameters
    ----------
    totals : sequence of int
        Steps of each pass (for the last, the shards its write publishes).
    names : sequence of str
        What each pass does, for the description.
    show : bool
        Whether to show it.
    """

    def __init__(self, totals: list[int], names: list[str], show: bool) -> None:
        self.bar = bar_class()(
            total=sum(totals),
            unit="step",
            desc=f"pass 1 of {len(names)}: {names[0]}",
            disable=not show,
            dynamic_ncols=True,
        )
        self._names = names
        self._totals = list(totals)
        self._lock = threading.Lock()

    def start_pass(self, number: int, steps: int | None = None) -> None:
        """Show that pass ``number`` (from 1) runs; ``steps`` corrects its count when known.

        A count is known once the pass is planned: the copy of a resumed
        rechunk keeps some blocks, the write of the last pass may differ
        from its plan's estimate.
        """
        with self._lock:
            if steps is not None:  # the passes before this one are done: n counts them
                self._totals[number - 1] = steps
                self.bar.total = self.bar.n + sum(self._totals[number - 1 :])
            self.bar.set_description_str(
                f"pass {number} of {len(self._names)}: {self._names[number - 1]}", refresh=False
            )
            self.bar.refresh()

    def advance(self, steps: int = 1) -> None:
        """Count ``steps`` steps done (safe from several threads)."""
        with self._lock:
            self.bar.update(steps)

    @contextmanager
    def carried(self) -> Iterator[PassesBar]:
        """While inside: the :class:`ShardBar` of a write made here advances this bar."""
        token = _CARRIED.set(self)
        try:
            yield self
        finally:
            _CARRIED.reset(token)

    def close(self) -> None:
        """Draw the bar a last time and release it."""
        self.bar.close()


_CARRIED: ContextVar[PassesBar | None] = ContextVar("shardpipe_passes_bar", default=None)
"""The bar of the passes of the job running in this context, if any."""


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
        passes = _CARRIED.get()
        self._owned = passes is None
        if passes is None:
            self._bar = bar_class()(
                total=total_shards,
                unit="shard",
                desc="shardpipe",
                disable=not show,
                dynamic_ncols=True,
            )
        else:
            self._bar = passes.bar
            self._bar.total = self._bar.n + total_shards
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
        if self._owned:
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
