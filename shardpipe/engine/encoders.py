"""Encoding one task's inner chunks on several threads while cores would otherwise idle.

A write runs one task per shard (or per part of a shard). While at least as
many such tasks run as this process has cores, each encodes its chunks on its
own thread, as it always has. When fewer run (a single-shard update, a stream
of appends, the last shards of a write, a rechunk of a few huge shards), the
idle cores can encode the next chunks of a running task: zstd, blosc, gzip,
NumPy's copies and crc32c release the GIL, so those encodings run in parallel.

:func:`encode_in_order` does it: it hands chunks to a thread pool the process
shares and yields their encodings in order. Before each chunk is handed on
it sizes its window again: one, plus the cores that no task of this process
(:func:`encoding_task` counts them) keeps busy, up to the task's ``most``.
When other tasks start, it falls back to encoding one chunk at a time on the
task's own thread; the bytes are the same either way, and in the same order.

Memory: each chunk being encoded holds the memory model's ``working`` bytes
(:class:`~shardpipe.core.memory.MemoryModel`); a window of ``e`` chunks holds
``(e - 1) x working`` more than one. The pool a task uses has ``most``
threads, so no more than ``most`` threads ever hold a scratch buffer of the
write's codec. ``most`` comes from the write's plan
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

from dask.system import CPU_COUNT

_lock = threading.Lock()
_running = 0
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


def running_tasks() -> int:
    """Encoding tasks running in this process now (:func:`encoding_task`)."""
    return _running


def window(most: int) -> int:
    """Chunks one task may encode at once now: 1 + the idle cores, at most ``most``."""
    if most <= 1:
        return 1
    idle = task_threads() - max(_running, 1)
    return 1 + max(0, min(most - 1, idle))


def _shared_pool(threads: int) -> ThreadPoolExecutor:
    """The process's pool of ``threads`` encoding threads (made again in a forked child).

    Tasks allowed the same window share one pool: no more threads than that
    ever encode their chunks, so no more per-thread scratch buffers exist
    for their codec (:class:`~shardpipe.codec.plain_chain.PlainChain`).
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
    With a window of one, jobs are encoded on the calling thread. An
    exception of ``encode`` is raised here, at its job's turn; jobs handed on
    after it are cancelled or waited for before it propagates.
    """
    pending: deque[Future[R]] = deque()
    try:
        for job in jobs:
            width = window(most)
            while len(pending) >= width:
                yield pending.popleft().result()
            if pending or width > 1:
                pending.append(_shared_pool(most).submit(encode, job))
            else:
                yield encode(job)
        while pending:
            yield pending.popleft().result()
    finally:
        for future in pending:
            future.cancel()
        wait(pending)
