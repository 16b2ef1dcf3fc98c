"""Encoding one task's inner chunks on several threads while cores would otherwise idle.

A write runs one task per shard (or per part of a shard). While at least as
many such tasks run as this process has cores, each encodes its chunks on its
own thread, as it always has. When fewer run (a single-shard update, a stream
of appends, the last shards of a write, a rechunk of a few huge shards), the
idle cores can encode the next chunks of a running task: zstd, blosc, gzip,
NumPy's copies and crc32c release the GIL, so those encodings run in parallel.

:func:`encode_in_order` does it: it hands chunks to a thread pool the process
shares, encodes one of every window on the task's own thread, and yields
the encodings in order. Before each chunk is handed on
it sizes its window again: one, plus the cores that no task of this process
keeps busy or is about to (:func:`busy_threads`), up to the task's ``most``.
When other tasks start, it falls back to encoding one chunk at a time on the
task's own thread; the bytes are the same either way, and in the same order.
A task waiting for a thread counts as busy: the thread that ends its task
starts it at once, so handing it chunks would only put three threads on two
cores (measured on 2 cores, a 512 MiB write took 2-3% longer when chunks went
to the pool in the moments between one task and the next).

Memory: each chunk being encoded holds the memory model's ``working`` bytes
(:class:`~shardpipe.core.memory.MemoryModel`); a window of ``e`` chunks holds
``(e - 1) x working`` more than one. The task's own thread encodes one chunk
of its window and the pool ``e - 1``: the pool a task uses has ``most - 1``
threads, so no more than ``most - 1`` threads besides the tasks' ever hold a
scratch buffer of the write's codec, or a malloc arena of encoded chunks.
``most`` comes from the write's plan
(:meth:`~shardpipe.core.plan.WritePlan.encoders`): the largest window that
keeps every task within ``max_mem``.
"""

from __future__ import annotations

import os
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from typing import Any

from dask.system import CPU_COUNT

_lock = threading.Lock()
_running = 0
_handed = 0
_pools: dict[int, ThreadPoolExecutor] = {}
_pools_pid = 0


def task_threads() -> int:
    """Threads this process runs tasks on: a ``distributed`` worker's, else the machine's cores."""
    distributed = sys.modules.get("distributed")  # not imported: not in a worker
    if distributed is not None:
        try:
            return max(1, int(distributed.get_worker().state.nthreads))
        except (ValueError, AttributeError):
            pass
    return CPU_COUNT


@contextmanager
def encoding_task() -> Iterator[None]:
    """Count the calling task among the encoding tasks running in this process."""
    global _running
    with _lock:
        _running += 1
    try:
        yield
    finally:
        with _lock:
            _running -= 1


def count_handed(future: Future[Any]) -> None:
    """Count the task of ``future``, handed to this process's task threads, until it is done.

    shardpipe's threaded runner calls it for every task it hands its pool:
    a task waiting there for a thread keeps a core busy as soon as a task
    ends (:func:`busy_threads`).
    """
    global _handed
    with _lock:
        _handed += 1
    future.add_done_callback(_handed_done)


def _handed_done(_: Future[Any]) -> None:
    global _handed
    with _lock:
        _handed -= 1


def busy_threads() -> Callable[[], int]:
    """How to count the task threads of this process that are busy now or about to be.

    The most of: the encoding tasks running (:func:`encoding_task`), the
    tasks handed to the threaded runner's pool and not done
    (:func:`count_handed`), and on a ``distributed`` worker, the tasks it
    executes and those ready and waiting for a thread. Returned as a
    function, asked once per chunk: where it looks is found once per task.
    """
    distributed = sys.modules.get("distributed")  # not imported: not in a worker
    if distributed is not None:
        try:
            state = distributed.get_worker().state
        except (ValueError, AttributeError):
            pass
        else:
            return lambda: max(_running, _handed, state.executing_count + len(state.ready))
    return lambda: max(_running, _handed)


def window(most: int, threads: int | None = None, busy: int | None = None) -> int:
    """Chunks one task may encode at once now: 1 + the idle cores, at most ``most``.

    ``threads`` is :func:`task_threads` and ``busy`` what :func:`busy_threads`
    counts, when the caller has them (the threads do not change while a task
    runs; asking a ``distributed`` worker for them costs about a
    microsecond, every chunk).
    """
    if most <= 1:
        return 1
    threads = task_threads() if threads is None else threads
    busy = busy_threads()() if busy is None else busy
    return 1 + max(0, min(most - 1, threads - max(busy, 1)))


def _shared_pool(threads: int) -> ThreadPoolExecutor:
    """The process's pool of ``threads`` encoding threads (made again in a forked child).

    Tasks allowed the same window share one pool of one thread fewer (each
    task's own thread encodes too): no more threads than that ever encode
    their chunks, so no more per-thread scratch buffers (and malloc arenas)
    exist for their codec (:class:`~shardpipe.codec.plain_chain.PlainChain`).
    """
    global _pools_pid
    with _lock:
        if _pools_pid != os.getpid():
            _pools.clear()  # the threads of a parent process are not in this one
            _pools_pid = os.getpid()
        pool = _pools.get(threads)
        if pool is None:
            pool = _pools[threads] = ThreadPoolExecutor(
                threads, thread_name_prefix="shardpipe-encode"
            )
        return pool


def encode_in_order[T, R](encode: Callable[[T], R], jobs: Iterable[T], most: int) -> Iterator[R]:
    """``encode(job)`` for every job, in order, up to :func:`window` ``(most)`` at once.

    Lazily: a job is taken from ``jobs`` only when the window has room, so
    at most a window of jobs and their results are held beyond the caller's.
    The calling thread encodes its share: with a window of ``w``, ``w - 1``
    jobs go to the pool while it encodes the next one itself, so the pool
    needs ``most - 1`` threads, and a window of one is encoded on the
    calling thread alone. A thread that allocates gets a malloc arena of its
    own (glibc), which keeps what it freed for the next allocation: fewer
    threads encoding means fewer arenas holding encoded chunks, a lower peak
    RSS. An exception of ``encode`` is raised here, at its job's turn; jobs
    handed on after it are cancelled or waited for before it propagates.
    """
    pending: deque[Future[R] | _Done[R]] = deque()
    in_pool = 0
    threads = task_threads()
    busy = busy_threads()
    try:
        for job in jobs:
            width = window(most, threads, busy())
            while len(pending) >= width:
                first = pending.popleft()
                if isinstance(first, Future):
                    in_pool -= 1
                yield first.result()
            if in_pool < width - 1:
                pending.append(_shared_pool(most - 1).submit(encode, job))
                in_pool += 1
            elif pending:
                pending.append(_Done(encode(job)))
            else:
                yield encode(job)
        while pending:
            yield pending.popleft().result()
    finally:
        running = [p for p in pending if isinstance(p, Future)]
        for future in running:
            future.cancel()
        wait(running)


class _Done[R]:
    """A job the calling thread encoded, waiting for its turn behind the pool's."""

    __slots__ = ("value",)

    def __init__(self, value: R) -> None:
        self.value = value

    def result(self) -> R:
        """The encoding (as :meth:`concurrent.futures.Future.result`)."""
        return self.value
