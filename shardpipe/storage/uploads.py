"""Uploads in the background of a process: encoding goes on while objects travel.

On an object store every request waits out a round trip and one
connection's bandwidth; throughput comes from many requests in flight. A
shard task that blocks its thread on its own ``PutObject`` leaves as many
uploads in flight as the process has task threads (two, on two cores), and
the cores idle while they wait. Here a publishing task hands its encoded
shard to this process's uploads (:func:`hand_on`) and returns; the shard
goes up on an I/O thread while the task's thread encodes the next shard.

What is in flight is bounded twice: by requests (:data:`DEFAULT_REQUESTS`,
``shardpipe.uploads.requests`` in Dask's config) and by bytes (the
write's ``max_mem``: encoded bytes handed on and not yet stored). A task
that would pass either waits, holding its thread, until an upload ends:
encoding never runs further ahead of the store than the budget.

Uploads belong to a *group*, the run of the write that handed them on. A
run opens its group in every process its tasks may run in (:func:`open_group`)
before any task starts, and a task hands on only where its group is open;
anywhere else (a worker process that joined later, Dask's ``"processes"``
scheduler) it uploads in its own thread as before. The run then settles
each batch's uploads (:func:`settle`) before it records the batch done:
a shard counts as written only once its upload ended, and a failed upload
fails the run: the run's next task to hand an upload on raises its error,
so the run stops instead of encoding shards nobody stores. When a run
fails, :func:`close_group` waits for every upload of the group still in
flight before the run cleans up, so that nothing lands after the cleanup.

A kill -9 of the process loses what was in flight: every upload is one
whole-object put, so a reader sees the old object (or none) at its key,
and the run's record does not count the shard written; ``resume=True``
writes it again.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import dask.config

from shardpipe.errors import InvalidArgumentError
from shardpipe.storage.retry import retries_so_far

DEFAULT_REQUESTS = 32
"""Most uploads in flight in one process (``shardpipe.uploads.requests``).

An object store serves each connection at tens of MB/s; 32 connections
reach about a GB/s, what a cloud instance's network gives. The S3 file
systems shardpipe makes keep that many connections open
(:data:`~shardpipe.storage.s3.config.DEFAULT_CONFIG`).
"""


MAX_REQUESTS = 256
"""Most uploads in flight in one process, whatever the settings ask."""


@dataclass(frozen=True)
class UploadRun:
    """A run whose tasks hand their uploads on, and how much it may have in flight per process.

    Attributes
    ----------
    group : str
        The run's group (its token): open in the processes that settle it.
    requests : int
        Most uploads at once (``shardpipe.uploads.requests``).
    nbytes : int
        Most bytes handed on and not yet stored (the write's ``max_mem``).
    part_size : int or None
        Bytes per part of a shard long enough to go up in parts, where the
        store writes parts (``shardpipe.uploads.part-size``,
        :mod:`shardpipe.storage.parted_puts`); None: every shard in one put.
    """

    group: str
    requests: int
    nbytes: int
    part_size: int | None = None


def request_limit() -> int:
    """Most uploads in flight per process: ``shardpipe.uploads.requests`` or the default.

    Read where the write is planned (the client): its tasks carry it to the
    workers in :class:`UploadRun`.

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        If the setting is not an integer from 1 to :data:`MAX_REQUESTS`.
    """
    value = dask.config.get("shardpipe.uploads.requests", DEFAULT_REQUESTS)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_REQUESTS:
        raise InvalidArgumentError(
            "shardpipe.uploads.requests",
            f"{value!r} (Dask config) is not an integer from 1 to {MAX_REQUESTS}",
            f"set an integer from 1 to {MAX_REQUESTS}, e.g. "
            f"dask.config.set({{'shardpipe.uploads.requests': {DEFAULT_REQUESTS}}})",
        )
    return value


@dataclass(frozen=True)
class Ticket:
    """An upload handed on: where it runs, and its number there.

    Attributes
    ----------
    place : str
        The address of the ``distributed`` worker whose process holds it;
        empty outside a worker.
    process : int
        The id of that process (``os.getpid()``).
    number : int
        Its number among that process's uploads.
    """

    place: str
    process: int
    number: int


class Uploads:
    """The uploads in flight in one process, bounded by requests and bytes."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._open: dict[str, int] = {}  # group -> runs holding it open
        self._running: dict[int, int] = {}  # number -> bytes, until the upload ends
        self._unsettled: dict[int, tuple[str, Future[int]]] = {}  # number -> group, outcome
        self._failed: dict[str, BaseException] = {}  # group -> its first failed upload
        self._nbytes = 0
        self._numbers = 0
        self.peak_nbytes = 0
        """Most bytes that were in flight at once (for tests and benchmarks)."""
        self.peak_requests = 0
        """Most uploads that were in flight at once."""
        # threads are made as uploads need them; hand_on keeps them within each run's limit
        self._pool = ThreadPoolExecutor(MAX_REQUESTS, thread_name_prefix="shardpipe-upload")

    def open_group(self, group: str) -> None:
        """Let tasks of ``group`` hand uploads on (counted: opened as often as closed)."""
        with self._changed:
            self._open[group] = self._open.get(group, 0) + 1

    def is_open(self, group: str) -> bool:
        """Whether tasks of ``group`` may hand uploads on in this process."""
        return group in self._open

    def hand_on(self, run: UploadRun, nbytes: int, upload: Callable[[], None]) -> Ticket:
        """Run ``upload`` on an I/O thread once requests and bytes allow; return its ticket.

        Waits while ``run.requests`` uploads are in flight, or while the
        bytes in flight and ``nbytes`` would pass ``run.nbytes`` (an upload
        larger than that goes alone).

        Raises
        ------
        Exception
            The error of an upload of the same run that failed: the run is
            lost, and its tasks stop rather than encode shards nobody stores.
        """
        with self._changed:
            self._changed.wait_for(
                lambda: (
                    run.group in self._failed
                    or (
                        len(self._running) < run.requests
                        and (not self._running or self._nbytes + nbytes <= run.nbytes)
                    )
                )
            )
            if run.group in self._failed:
                raise self._failed[run.group]
            self._numbers += 1
            number = self._numbers
            self._running[number] = nbytes
            self._nbytes += nbytes
            self.peak_nbytes = max(self.peak_nbytes, self._nbytes)
            self.peak_requests = max(self.peak_requests, len(self._running))
            future = self._pool.submit(_counting_retries, upload)
            self._unsettled[number] = (run.group, future)
        future.add_done_callback(lambda ended: self._ended(number, run.group, ended))
        return Ticket(_worker_address(), os.getpid(), number)

    def _ended(self, number: int, group: str, ended: Future[int]) -> None:
        with self._changed:
            self._nbytes -= self._running.pop(number)
            failure = None if ended.cancelled() else ended.exception()
            if failure is not None and group in self._open:
                self._failed.setdefault(group, failure)
            self._changed.notify_all()

    def settle(self, numbers: Iterable[int]) -> list[int]:
        """Wait for the uploads ``numbers``; return the retries of each; raise the first failure.

        Every one is waited for before a failure is raised. A number settled
        before (or never handed on) made no retries.
        """
        with self._changed:
            futures = [self._unsettled.pop(n, (None, None))[1] for n in numbers]
        return _outcome(futures)

    def close_group(self, group: str, *, failed: bool) -> None:
        """Close ``group``: wait for its uploads not settled yet.

        After a run that ``failed`` their errors are dropped (the run raises
        its own); otherwise the first is raised, as :meth:`settle` would.
        """
        with self._changed:
            count = self._open.get(group, 0) - 1
            if count > 0:
                self._open[group] = count
            else:
                self._open.pop(group, None)
                self._failed.pop(group, None)
            mine = [n for n, (g, _) in self._unsettled.items() if g == group]
            futures = [self._unsettled.pop(n)[1] for n in mine]
        if failed:
            for future in futures:
                future.exception()  # waits
        else:
            _outcome(futures)


def _outcome(futures: Sequence[Future[int] | None]) -> list[int]:
    """The retries of each of ``futures`` once all ended; the first failure raised after all."""
    retries, failure = [], None
    for future in futures:
        try:
            retries.append(0 if future is None else future.result())
        except BaseException as err:  # every one ends before the first is raised
            failure = failure or err
    if failure is not None:
        raise failure
    return retries


def _worker_address() -> str:
    """The address of the ``distributed`` worker running this thread's task, or ""."""
    distributed = sys.modules.get("distributed")  # not imported: not in a worker
    if distributed is None:
        return ""
    try:
        return str(distributed.get_worker().address)
    except ValueError:
        return ""


def _counting_retries(upload: Callable[[], None]) -> int:
    before = retries_so_far()
    upload()
    return retries_so_far() - before


_uploads: Uploads | None = None
_uploads_pid = 0
_lock = threading.Lock()


def process_uploads() -> Uploads:
    """This process's uploads (made anew in a forked child: threads do not survive a fork)."""
    global _uploads, _uploads_pid
    with _lock:
        if _uploads is None or _uploads_pid != os.getpid():
            _uploads, _uploads_pid = Uploads(), os.getpid()
        return _uploads


def open_group(group: str) -> None:
    """Let the tasks of the run ``group`` hand their uploads on in this process."""
    process_uploads().open_group(group)


def close_group(group: str, *, failed: bool) -> None:
    """End the run ``group`` here: wait for what it has in flight (:meth:`Uploads.close_group`)."""
    process_uploads().close_group(group, failed=failed)


def settle(tickets: Sequence[Ticket]) -> list[int]:
    """Wait for the uploads of ``tickets`` handed on in this process; return each one's retries.

    Raises
    ------
    ValueError
        If a ticket belongs to another process (the caller settles each
        process's tickets there).
    """
    here = os.getpid()
    numbers = []
    for ticket in tickets:
        if ticket.process != here:
            raise ValueError(f"upload {ticket} was handed on in another process")
        numbers.append(ticket.number)
    return process_uploads().settle(numbers) if numbers else []


def hand_on(run: UploadRun | None, nbytes: int, upload: Callable[[], None]) -> Ticket | None:
    """Hand ``upload`` (``nbytes`` in flight) to this process's uploads, if ``run`` is open here.

    Returns
    -------
    Ticket or None
        The ticket to settle, or None when ``run`` is None or not open in
        this process: the caller then uploads itself.
    """
    if run is None:
        return None
    uploads = process_uploads()
    if not uploads.is_open(run.group):
        return None
    return uploads.hand_on(run, nbytes, upload)
