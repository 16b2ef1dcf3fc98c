"""Run writes wave by wave: a bounded graph on the scheduler, the next one built meanwhile.

A write's shards are cut into waves (:mod:`shardpipe.core.waves`) of about
an eighth of :func:`wave_tasks` tasks each; each wave's graph is built only
when it is needed. The first wave is submitted alone, as soon as it is
built, so the first shards are written early; after it, waves are submitted
in *batches* of at least :func:`wave_tasks` tasks (small waves, of the arrays
of a dataset say, go in one batch so that they share the workers). While
one batch runs, the next is built and submitted, so that the workers never
wait for the client; at most two batches are on the scheduler at once.
When a batch is done, each of its waves is reported done in order (a write
records it, for resume).

On ``distributed`` a batch is a set of futures; on Dask's threaded
scheduler it is a run of Dask's local scheduler in a driver thread, every
batch sharing one pool of worker threads (so no more tasks run at once than
the pool has threads); on any other scheduler batches run one after the
other (on ``"processes"`` with a pool of Dask's config, through a
:class:`HandedTasks` that keeps what it handed on).

If a task fails, no task of the write (``token`` is in every task's name)
is still running when the error is raised: tasks not started are
cancelled and running ones are waited for, so that the caller can roll
back and clean up without a task writing under it.
"""

from __future__ import annotations

import multiprocessing.pool
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Protocol

import dask
import dask.multiprocessing
import dask.threaded
from dask.base import compute
from dask.delayed import Delayed
from dask.highlevelgraph import HighLevelGraph
from dask.local import MultiprocessingPoolExecutor, get_async
from dask.system import CPU_COUNT
from dask.threaded import ContextAwareThreadPoolExecutor

from shardpipe.engine.encoders import count_handed
from shardpipe.engine.heap import mmap_threshold
from shardpipe.engine.progress import ShardBar, local_progress
from shardpipe.engine.pyramid_gates import BlockConsumers, gate_levels
from shardpipe.engine.reports import WriteReport
from shardpipe.engine.scheduler import distributed_client, wait_idle
from shardpipe.engine.settling import ClusterSettling, LocalSettling, Settling

WAVE_TASKS = 16_000
"""Default most tasks of one batch of waves on the scheduler (``shardpipe.wave-tasks``).

At about 550 bytes a task, a batch's graph stays under the 10 MiB above which
``distributed`` warns of a large graph (20,000 tasks sent 11 MiB, measured)."""

WAVES_PER_BATCH = 8
"""A wave holds this fraction of a batch's tasks: the first wave, submitted alone, is
built in an eighth of the time a batch takes, so the first shards are written early."""

GATHER_EVERY = 0.5
"""Seconds between two collections of finished shards' reports on ``distributed``."""


def wave_tasks() -> int:
    """Most tasks one batch of waves may put on the scheduler.

    ``dask.config.set({"shardpipe.wave-tasks": n})`` changes it; the
    default, :data:`WAVE_TASKS`, keeps a batch's graph to tens of megabytes
    on the client and a fraction of a second of scheduler time per
    thousand tasks.
    """
    value = dask.config.get("shardpipe.wave-tasks", WAVE_TASKS)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"dask config shardpipe.wave-tasks must be a positive int, got {value!r}")
    return value


@dataclass(frozen=True)
class WaveGraph:
    """One wave of one job, ready to run.

    Parameters
    ----------
    job : int
        Index of the job it belongs to.
    wave : int
        Number of the wave in its job.
    publishing : list of Delayed
        Its publishing tasks, each computing to a :class:`~shardpipe.engine.reports.WriteReport`.
    n_tasks : int
        Tasks it puts on the scheduler (an estimate from the plan).
    blocks : BlockConsumers or None
        Its source's blocks and the tasks taking them, when other jobs'
        graphs take them too (see :func:`run_waves`, ``together``).
    """

    job: int
    wave: int
    publishing: list[Delayed]
    n_tasks: int
    blocks: BlockConsumers | None = None


class _Runner(Protocol):
    def submit(self, tasks: list[Delayed]) -> Any: ...

    def collect(self, handle: Any) -> list[WriteReport]: ...

    def close(self, *, failed: bool) -> None: ...


def run_waves(
    waves: Iterable[WaveGraph],
    n_jobs: int,
    *,
    show: bool,
    token: str,
    total_shards: int,
    total_waves: int,
    on_wave_done: Callable[[WaveGraph], None] = lambda wave: None,
    together: bool = False,
) -> list[WriteReport]:
    """Run every wave, at most two batches at once; return each job's summed report.

    Parameters
    ----------
    waves : iterable of WaveGraph
        The waves, in order; each is built when it is taken.
    n_jobs : int
        Number of jobs the waves belong to.
    show : bool
        Show a progress bar over shards and bytes, with waves and an ETA.
    token : str
        Unique id of the run, part of every task's name.
    total_shards, total_waves : int
        The bar's totals.
    on_wave_done : callable
        Called with each wave once it and every wave before it are done.
    together : bool
        Run every wave in one batch, one computation: the jobs share blocks
        (the levels of a pyramid) that must be computed once for all. Their
        blocks go through read gates over the whole computation
        (:func:`~shardpipe.engine.pyramid_gates.gate_levels`).
    """
    totals = [WriteReport() for _ in range(n_jobs)]
    limit = wave_tasks()
    mmap_threshold()  # its setting checked before anything runs (tasks apply it)
    with ShardBar(total_shards, total_waves, show) as bar:
        runner = _runner_for_scheduler(bar, token)
        in_flight: deque[tuple[Any, list[WaveGraph]]] = deque()

        def finish_oldest() -> None:
            handle, batch = in_flight.popleft()
            reports = iter(runner.collect(handle))
            for wave in batch:
                for _ in wave.publishing:
                    report = next(reports)
                    totals[wave.job] = totals[wave.job] + report
                bar.wave_done()
                on_wave_done(wave)

        try:
            batch: list[WaveGraph] = []
            tasks = 0
            for wave in waves:
                batch.append(wave)
                tasks += wave.n_tasks
                if not together and (tasks >= limit or not in_flight):  # the first at once
                    in_flight.append((runner.submit(_publishing(batch)), batch))
                    batch, tasks = [], 0
                    while len(in_flight) > 1:
                        finish_oldest()
            if batch:
                publishing = _publishing(batch)
                if together:
                    uses = [w.blocks for w in batch if w.blocks is not None]
                    publishing = gate_levels(publishing, uses, token) or publishing
                in_flight.append((runner.submit(publishing), batch))
            while in_flight:
                finish_oldest()
        except BaseException:
            runner.close(failed=True)
            raise
        runner.close(failed=False)
    return totals


def _publishing(batch: Sequence[WaveGraph]) -> list[Delayed]:
    return [task for wave in batch for task in wave.publishing]


def _runner_for_scheduler(bar: ShardBar, token: str) -> _Runner:
    client = distributed_client()
    if client is not None:
        return _ClusterRunner(client, bar, token)
    # None: no scheduler configured, where Dask computes arrays and delayed on threads
    scheduler = dask.base.get_scheduler()
    if scheduler in (None, dask.threaded.get):
        return _ThreadsRunner(bar, LocalSettling(token))
    pool = dask.config.get("pool", None)
    if scheduler is dask.multiprocessing.get and pool is not None:
        return _InlineRunner(bar, LocalSettling(token), HandedTasks(pool))
    return _InlineRunner(bar, LocalSettling(token))


class HandedTasks:
    """An executor that hands tasks on to ``pool`` and keeps the ones not yet done.

    For ``scheduler="processes"`` on a pool of Dask's config
    (``dask.config.set(pool=...)``): Dask's multiprocessing scheduler raises
    a task's error as soon as it comes back and leaves such a pool running,
    with the other tasks it was handed still at work. Given this executor
    as its pool instead, the caller can :meth:`wait` for them. (Without a
    pool in the config, Dask makes one per computation and shuts it down,
    waiting for its tasks, before the error is raised.)

    Parameters
    ----------
    pool : concurrent.futures.Executor or multiprocessing.pool.Pool
        The pool of Dask's config.
    """

    def __init__(self, pool: Any) -> None:
        if isinstance(pool, multiprocessing.pool.Pool):
            pool = MultiprocessingPoolExecutor(pool)  # as Dask wraps one
        self.pool = pool
        self._max_workers: int = pool._max_workers  # what Dask's scheduler reads of a pool
        self._lock = threading.Lock()
        self._pending: set[Future[Any]] = set()

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future[Any]:
        """Hand ``fn(*args, **kwargs)`` on to the pool; its future is kept until it is done."""
        future: Future[Any] = self.pool.submit(fn, *args, **kwargs)
        with self._lock:
            self._pending.add(future)
        future.add_done_callback(self._done)
        return future

    def _done(self, future: Future[Any]) -> None:
        with self._lock:
            self._pending.discard(future)

    def wait(self) -> None:
        """Return once every task handed on has ended."""
        with self._lock:
            pending = list(self._pending)
        wait(pending)


class _InlineRunner:
    """Any other scheduler (``"sync"``, ``"processes"``, a custom ``get``): each batch
    computed when submitted, one after the other. With ``handed`` (``"processes"``
    on a pool of Dask's config) tasks go through it, and after a failure every task
    handed on is waited for, as Dask does for a pool of its own."""

    def __init__(
        self, bar: ShardBar, settling: Settling, handed: HandedTasks | None = None
    ) -> None:
        self.bar = bar
        self.settling = settling
        self.handed = handed

    def submit(self, tasks: list[Delayed]) -> list[WriteReport]:
        with local_progress(self.bar):
            if self.handed is None:
                return list(compute(*tasks))
            return list(compute(*tasks, pool=self.handed))

    def collect(self, handle: list[WriteReport]) -> list[WriteReport]:
        return self.settling.settle(handle)

    def close(self, *, failed: bool) -> None:
        if failed and self.handed is not None:
            self.handed.wait()
        self.settling.close(failed=failed)


QUEUED_PER_THREAD = 2
"""Tasks Dask's local scheduler hands the pool per thread (see ``_ThreadsRunner._compute``)."""

SHARED_TASKS = 2
"""Tasks besides the publishing ones in a batch of shard tasks alone: the targets they share.

A write's target, and an update's second view of it for the tasks that
encode pieces (:func:`~shardpipe.engine.graph.build_write_graph`).
"""


def _with_traceback(error: BaseException, dumps: Any) -> tuple[BaseException, Any]:
    """How a task's exception travels back to Dask's local scheduler (as ``dask.threaded``)."""
    return error, sys.exc_info()[2]


class _ThreadsRunner:
    """Dask's threaded scheduler: batches in driver threads, sharing one pool of workers."""

    def __init__(self, bar: ShardBar, settling: Settling) -> None:
        self.settling = settling
        self.workers = dask.config.get("num_workers", None) or CPU_COUNT
        # as Dask's own pool: tasks see the caller's context variables (shardpipe.advice)
        self.pool: ThreadPoolExecutor = ContextAwareThreadPoolExecutor(
            self.workers, thread_name_prefix="shardpipe-worker"
        )
        self.drivers: ThreadPoolExecutor = ContextAwareThreadPoolExecutor(
            2, thread_name_prefix="shardpipe-wave"
        )
        self.progress = local_progress(bar)
        self.progress.__enter__()

    def _compute(self, tasks: list[Delayed]) -> list[WriteReport]:
        """Run a batch: what ``dask.compute(*tasks, scheduler="threads")`` does, quicker.

        The Delayed objects' own optimization, then Dask's local scheduler
        on the pool, without ``compute``'s collection layer (3-4 ms a batch:
        much of a small update's time). The scheduler keeps
        :data:`QUEUED_PER_THREAD` tasks per thread handed to the pool, so
        that a thread that ends a task starts the next one at once, instead
        of waiting for the scheduler's thread to wake and hand it one (about
        0.2 ms between every two shard tasks on each thread, measured on a
        2-core machine), when the batch is shard tasks alone (each a whole
        shard from blocks it reads itself). Tasks wait in the pool's queue,
        not running: the memory model's count of tasks running at once is
        unchanged.
        """
        keys = [task.key for task in tasks]
        graph = HighLevelGraph.merge(*(task.__dask_graph__() for task in tasks))
        optimized = Delayed.__dask_optimize__(graph, keys)
        # only where the shard tasks are all there is: queued tasks are run in the order
        # they were handed on, so a task finishing a shard (a stamp after its parts)
        # would wait behind tasks that start others
        alone = len(optimized) <= len(keys) + SHARED_TASKS
        results = get_async(
            self._hand,
            self.workers * (QUEUED_PER_THREAD if alone else 1),
            optimized,
            keys,
            get_id=threading.get_ident,
            pack_exception=_with_traceback,
        )
        return list(results)

    def _hand(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future[Any]:
        """Hand a task to the pool, counted until done.

        See :func:`~shardpipe.engine.encoders.count_handed`.
        """
        future = self.pool.submit(fn, *args, **kwargs)
        count_handed(future)
        return future

    def submit(self, tasks: list[Delayed]) -> Future[list[WriteReport]]:
        return self.drivers.submit(self._compute, tasks)

    def collect(self, handle: Future[list[WriteReport]]) -> list[WriteReport]:
        return self.settling.settle(handle.result())

    def close(self, *, failed: bool) -> None:
        # after a failure, queued tasks are cancelled (the compute of their batch
        # then raises in its driver) and running ones end before this returns,
        # then the uploads they handed on
        try:
            self.pool.shutdown(wait=True, cancel_futures=failed)
            self.drivers.shutdown(wait=True, cancel_futures=failed)
        finally:
            self.settling.close(failed=failed)
            self.progress.__exit__(None, None, None)


class _ClusterRunner:
    """``distributed``: each batch a set of futures, reports gathered in batches.

    Reports are collected from the workers at most every
    :data:`GATHER_EVERY` seconds, at the end of a batch and at the first
    failure: one request per worker and gathering instead of one per task,
    each of which costs the client's, the scheduler's and a worker's event
    loops time taken from the workers on a small machine.
    """

    def __init__(self, client: Any, bar: ShardBar, token: str) -> None:
        self.client = client
        self.bar = bar
        self.token = token
        self.futures: list[list[Any]] = []
        self.settling = ClusterSettling(client, token)

    def submit(self, tasks: list[Delayed]) -> list[Any]:
        futures: list[Any] = self.client.compute(tasks)
        self.futures.append(futures)
        return futures

    def collect(self, futures: list[Any]) -> list[WriteReport]:
        from distributed import as_completed

        position = {f.key: i for i, f in enumerate(futures)}
        reports: list[WriteReport | None] = [None] * len(futures)
        pending: list[Any] = []

        def gather() -> None:
            for future, report in zip(pending, self.client.gather(pending), strict=True):
                reports[position[future.key]] = report
                self.bar.advance(report)
            pending.clear()

        gathered = time.monotonic()
        finished = as_completed(futures)
        for batch in finished.batches():
            pending.extend(batch)
            failed = any(f.status != "finished" for f in batch)
            if failed or finished.is_empty() or time.monotonic() - gathered >= GATHER_EVERY:
                gather()
                gathered = time.monotonic()
        if pending:
            gather()
        self.futures.remove(futures)
        return self.settling.settle([r for r in reports if r is not None])

    def close(self, *, failed: bool) -> None:
        if failed:
            for futures in self.futures:
                self.client.cancel(futures)
            wait_idle(self.client, self.token)
        self.settling.close(failed=failed)
