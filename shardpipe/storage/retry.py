"""Retries of transient storage faults, and plain words for permanent ones.

Every backend a write uses is wrapped in a :class:`RetryingStore`. It sorts
each failure of the backend into one of three kinds:

* **transient** (:class:`~shardpipe.errors.TransientStorageError`, raised by
  the S3 backend for HTTP 5xx, throttling, timeouts and connection resets;
  ``EINTR``, ``EAGAIN``, ``ETIMEDOUT``, ``ECONNRESET`` from a file system):
  tried again after an exponential backoff with full jitter, at most
  ``attempts`` times in all (:class:`RetryPolicy`);
* **permanent** (``ENOSPC``/``EDQUOT``: :class:`~shardpipe.errors.StorageFullError`;
  ``EROFS``/``EACCES``/``EPERM``: :class:`~shardpipe.errors.StorageAccessError`;
  ``EIO``, a device that failed: :class:`~shardpipe.errors.StorageError`, its
  ``errno`` kept): raised at once, with the key and the cause in the message
  (the error numbers are sorted in :mod:`shardpipe.storage.errnos`);
* **everything else** (an absent object, a failed condition, a bug) passes
  through untouched.

A retry never leaves a mix of two attempts, because every operation is
idempotent or made so here:

* ``put`` publishes a whole object atomically; a conditional ``put`` whose
  first try failed transiently and whose retry finds the condition false
  (the first try did land) succeeds if the object holds exactly its bytes;
* ``write_part``/``copy_part`` replace the part of the same number (or, for
  parts in any order on a file system, write it again, and the new receipt
  says where);
  ``write_at``, ``write_ranges`` and ``truncate`` write the same bytes again;
* ``append`` cuts the object back to its size before the failed try first;
* ``finish_parts`` is retried only on transient errors, raised when nothing
  was published or when the backend could not tell: the S3 backend checks
  whether a completion whose answer was lost went through, the local one
  whether its object is at the key (a failed ``fsync`` of the folder after
  the rename).

Retries are counted per thread (:func:`retries_so_far`), so that each task
can report its own in the write report.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Buffer, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from shardpipe import advice
from shardpipe.errors import (
    ConditionFailedError,
    InvalidArgumentError,
    TransientStorageError,
)
from shardpipe.storage.base import ObjectVersion, ShardStore
from shardpipe.storage.delegating import DelegatingStore
from shardpipe.storage.errnos import is_transient, permanent_error
from shardpipe.storage.keys import edge_key
from shardpipe.storage.parts import PartReceipt, PartsHandle

DELETE_SLICE = 1000
"""Keys one retried call of :meth:`RetryingStore.delete_many` removes.

The most S3's ``DeleteObjects`` takes in one request: on S3 a slice is one request."""

T = TypeVar("T")


class _ProducerFailed(Exception):
    """Carries the failure of a streamed put's producer past the retries, untouched."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass(frozen=True)
class RetryPolicy:
    """How transient storage faults are tried again.

    The delay before retry ``n`` (from 1) is drawn uniformly from
    ``[0, min(max_delay, first_delay * 2 ** (n - 1))]`` ("full jitter"), so
    that workers that failed together do not retry together.

    Parameters
    ----------
    attempts : int
        Tries in all, the first included (1: no retry).
    first_delay : float
        Upper bound of the first delay, in seconds.
    max_delay : float
        Largest upper bound of a delay, in seconds.
    """

    attempts: int = 8
    first_delay: float = 0.25
    max_delay: float = 20.0

    def __post_init__(self) -> None:
        if not isinstance(self.attempts, int) or isinstance(self.attempts, bool):
            raise InvalidArgumentError(
                "retry.attempts", f"expected an int, got {self.attempts!r}", "Pass e.g. 6"
            )
        if self.attempts < 1:
            raise InvalidArgumentError(
                "retry.attempts",
                f"{self.attempts} tries leaves nothing to do",
                "Pass at least 1 (1 means no retry)",
            )
        for name in ("first_delay", "max_delay"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise InvalidArgumentError(
                    f"retry.{name}", f"expected seconds >= 0, got {value!r}", "Pass e.g. 0.2"
                )

    def delay(self, retry: int, rng: random.Random) -> float:
        """Seconds to wait before retry number ``retry`` (from 1)."""
        bound = min(self.max_delay, self.first_delay * 2.0 ** (retry - 1))
        return rng.uniform(0.0, bound)

    @property
    def worst_case_seconds(self) -> float:
        """The longest the delays of one operation can add up to."""
        return sum(
            min(self.max_delay, self.first_delay * 2.0 ** (n - 1)) for n in range(1, self.attempts)
        )


DEFAULT_POLICY = RetryPolicy()
"""The policy of every write unless Dask's config (``shardpipe.retry.*``) says otherwise."""

_JITTER = random.Random()
"""Draws the waits between tries: one for the process (seeding a fresh one per call costs
tens of microseconds, on every store call), seeded again in a forked child so that
processes forked from one parent do not wait in step."""
os.register_at_fork(after_in_child=_JITTER.seed)

_COUNTS = threading.local()


def retries_so_far() -> int:
    """How many retries the storage calls of this thread have made since it started."""
    return int(getattr(_COUNTS, "n", 0))


def _count_retry() -> None:
    _COUNTS.n = retries_so_far() + 1


class RetryingStore(DelegatingStore):
    """A backend whose transient faults are retried and permanent ones explained.

    Every method that touches storage is retried here; the rest (the
    abilities, :meth:`~shardpipe.storage.base.ShardStore.collecting` and
    :meth:`~shardpipe.storage.base.ShardStore.merge_changes`) is forwarded
    as :class:`~shardpipe.storage.delegating.DelegatingStore` forwards it.

    Parameters
    ----------
    inner : ShardStore
        The backend doing the work.
    policy : RetryPolicy
        How often and how long to retry.
    sleep : callable
        Waits the given seconds (tests pass a recorder).
    """

    def __init__(
        self,
        inner: ShardStore,
        policy: RetryPolicy = DEFAULT_POLICY,
        *,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__(inner)
        self.policy = policy
        self._sleep = sleep

    def __repr__(self) -> str:
        return f"RetryingStore({self.inner!r}, {self.policy})"

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        if state["_sleep"] is time.sleep:
            state["_sleep"] = None  # pickled by reference is fine, but keep it plain
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if self._sleep is None:
            self._sleep = time.sleep

    def _call(
        self,
        what: str,
        call: Callable[[], T],
        *,
        before_retry: Callable[[], None] | None = None,
        in_place: bool = False,
    ) -> T:
        """Run ``call`` (``in_place``: it changes an object in place), retrying transient faults."""
        for attempt in range(1, self.policy.attempts + 1):
            try:
                if attempt > 1 and before_retry is not None:
                    before_retry()  # inside the try: its own faults are sorted too
                return call()
            except OSError as err:
                self._after_failure(err, what, attempt, in_place=in_place)
        raise AssertionError("unreachable")  # pragma: no cover

    def _after_failure(
        self, err: OSError, what: str, attempt: int, *, in_place: bool = False
    ) -> None:
        """Raise ``err`` in plain words unless it is transient and tries are left; else wait."""
        permanent = permanent_error(err, what, in_place=in_place)
        if permanent is not None:
            raise permanent from err
        if not is_transient(err):
            raise err
        if attempt == self.policy.attempts:
            raise TransientStorageError(
                f"{what} still failed after {attempt} tries ({err}); the storage may "
                "be overloaded or unreachable. Nothing half-written was published; "
                f"run the same write with {advice.setting('resume')} once it answers again"
            ) from err
        self._sleep(self.policy.delay(attempt, _JITTER))
        _count_retry()

    # -- whole objects -------------------------------------------------------
    def put(
        self,
        key: str,
        buffers: Sequence[Buffer],
        *,
        if_absent: bool = False,
        if_version: ObjectVersion | None = None,
    ) -> None:
        """Publish ``buffers`` at ``key``; see :meth:`~shardpipe.storage.base.ShardStore.put`."""
        if not (if_absent or if_version is not None):
            self._call(f"writing {key!r}", lambda: self.inner.put(key, buffers))
            return
        failed_once = False

        def attempt() -> None:
            nonlocal failed_once
            try:
                self.inner.put(key, buffers, if_absent=if_absent, if_version=if_version)
            except ConditionFailedError:
                # an earlier try that failed in transit may have landed: then the
                # object holds exactly these bytes and the write is done
                if failed_once and self.inner.get(key) == b"".join(
                    memoryview(b).cast("B") for b in buffers
                ):
                    return
                raise
            except OSError as err:
                failed_once = failed_once or is_transient(err)
                raise

        self._call(f"writing {key!r}", attempt)

    def put_streamed(self, key: str, buffers: Iterable[Buffer]) -> int:
        """Publish ``buffers`` at ``key`` as they are produced.

        See :meth:`~shardpipe.storage.base.ShardStore.put_streamed`.

        The buffers produced are kept, so that a try that failed transiently
        is made again, from the start, with the same bytes: a retry never
        asks the producer twice. A failure of the producer itself (encoding
        a chunk) is never retried: it passes through, and nothing is published.
        """
        produced: list[Buffer] = []
        source = iter(buffers)

        def keep() -> Iterator[Buffer]:
            while True:
                try:
                    buffer = next(source)
                except StopIteration:
                    return
                except Exception as err:
                    raise _ProducerFailed(err) from err
                produced.append(buffer)
                yield buffer

        tries = 0

        def attempt() -> int:
            nonlocal tries
            tries += 1
            if tries == 1:
                return self.inner.put_streamed(key, keep())
            for _ in keep():  # keep() adds what the failed try had not asked for yet
                pass
            return self.inner.put_streamed(key, iter(produced))

        try:
            return self._call(f"writing {key!r}", attempt)
        except _ProducerFailed as failed:
            raise failed.error from None

    def make_durable(self, keys: Sequence[str]) -> None:
        """Make ``keys`` durable; see :meth:`~shardpipe.storage.base.ShardStore.make_durable`."""
        self._call(f"making {list(keys)!r} durable", lambda: self.inner.make_durable(keys))

    def get(self, key: str) -> bytes | None:
        """Return the bytes at ``key``, or None."""
        return self._call(f"reading {key!r}", lambda: self.inner.get(key))

    def get_within(self, key: str, limit: int) -> tuple[int, bytes | None] | None:
        """Return the size of ``key`` and its bytes up to ``limit``, or None."""
        return self._call(f"reading {key!r}", lambda: self.inner.get_within(key, limit))

    def get_into(self, key: str, out: Buffer) -> bool:
        """Read ``key`` into ``out``; False when absent."""
        return self._call(f"reading {key!r}", lambda: self.inner.get_into(key, out))

    def get_range(self, key: str, start: int, stop: int) -> bytes:
        """Return ``[start, stop)`` of ``key``."""
        return self._call(
            f"reading bytes {start}-{stop} of {key!r}",
            lambda: self.inner.get_range(key, start, stop),
        )

    def size(self, key: str) -> int | None:
        """Return the size of ``key``, or None."""
        return self._call(f"reading the size of {key!r}", lambda: self.inner.size(key))

    def version(self, key: str) -> ObjectVersion | None:
        """Return the version of ``key``, or None."""
        return self._call(f"reading the version of {key!r}", lambda: self.inner.version(key))

    def delete(self, key: str) -> None:
        """Remove ``key`` if present."""
        self._call(f"deleting {key!r}", lambda: self.inner.delete(key))

    def delete_many(self, keys: Sequence[str]) -> None:
        """Remove each of ``keys`` present, retrying :data:`DELETE_SLICE` keys at a time.

        Every key is checked first; then each slice is one call of the inner
        backend, retried on its own (removing is idempotent) with the policy's
        tries for each slice: a fault late in a million keys sends one slice
        again, not all that came before.
        """
        for key in keys:
            edge_key(key, self.inner)
        for start in range(0, len(keys), DELETE_SLICE):
            part = keys[start : start + DELETE_SLICE]
            what = (
                f"deleting keys {start + 1:,}-{start + len(part):,} of {len(keys):,} "
                f"(from {part[0]!r}; the {start:,} before are removed)"
            )
            self._call(what, partial(self.inner.delete_many, part))

    def list(self, prefix: str) -> Iterator[str]:
        """Iterate over the keys under ``prefix`` as the backend lists them (in string order).

        The listing streams: a listing that fails transiently is started
        again and carries on after the last key already given, so that no
        key comes twice. Each try that gives at least one new key starts the
        count of tries afresh.
        """
        last: str | None = None
        attempt = 1
        while True:
            after = last  # None on the first try: a listing out of order loses nothing then
            try:
                for key in self.inner.list(prefix):
                    if after is not None and key <= after:
                        continue
                    last, attempt = key, 1
                    yield key
                return
            except OSError as err:
                self._after_failure(err, f"listing {prefix!r}", attempt)
                attempt += 1

    # -- in-place updates ----------------------------------------------------
    def write_at(self, key: str, offset: int, buffers: Sequence[Buffer]) -> None:
        """Overwrite bytes of ``key`` at ``offset`` (the same bytes again on a retry)."""
        self._call(
            f"writing at byte {offset} of {key!r}",
            lambda: self.inner.write_at(key, offset, buffers),
            in_place=True,
        )

    def write_ranges(self, key: str, ranges: Sequence[tuple[int, Sequence[Buffer]]]) -> None:
        """Write ``ranges`` of ``key`` (the same bytes again on a retry)."""
        self._call(
            f"writing into {key!r}", lambda: self.inner.write_ranges(key, ranges), in_place=True
        )

    def append(self, key: str, buffers: Sequence[Buffer]) -> int:
        """Append to ``key``; a retry first cuts it back to its size before the failed try."""
        before = self._call(f"reading the size of {key!r}", lambda: self.inner.size(key))
        if before is None:
            raise FileNotFoundError(key)
        return self._call(
            f"appending to {key!r}",
            lambda: self.inner.append(key, buffers),
            before_retry=lambda: self.inner.truncate(key, before),
            in_place=True,
        )

    def truncate(self, key: str, size: int) -> None:
        """Cut ``key`` to ``size`` bytes."""
        self._call(f"truncating {key!r}", lambda: self.inner.truncate(key, size), in_place=True)

    # -- parts ---------------------------------------------------------------
    def begin_parts(self, key: str, staging: str, *, any_order: bool = False) -> PartsHandle:
        """Start writing ``key`` in parts."""
        return self._call(
            f"starting the upload of {key!r}",
            lambda: self.inner.begin_parts(key, staging, any_order=any_order),
        )

    def write_part(
        self, handle: PartsHandle, number: int, buffers: Sequence[Buffer]
    ) -> PartReceipt:
        """Write part ``number`` (a retry replaces it)."""
        return self._call(
            f"writing part {number} of {handle.key!r}",
            lambda: self.inner.write_part(handle, number, buffers),
        )

    def copy_part(
        self, handle: PartsHandle, number: int, source: str, start: int, stop: int
    ) -> PartReceipt:
        """Copy bytes of ``source`` into part ``number`` (a retry replaces it)."""
        return self._call(
            f"copying part {number} of {handle.key!r}",
            lambda: self.inner.copy_part(handle, number, source, start, stop),
        )

    def finish_parts(
        self,
        handle: PartsHandle,
        receipts: Sequence[PartReceipt],
        head: bytes,
        tail: bytes,
        *,
        if_absent: bool = False,
        if_version: ObjectVersion | None = None,
    ) -> None:
        """Publish the parts of ``handle``."""
        self._call(
            f"publishing {handle.key!r}",
            lambda: self.inner.finish_parts(
                handle, receipts, head, tail, if_absent=if_absent, if_version=if_version
            ),
        )

    def abort_parts(self, handle: PartsHandle) -> None:
        """Discard the parts of ``handle``."""
        self._call(
            f"discarding the parts of {handle.key!r}", lambda: self.inner.abort_parts(handle)
        )

    def discard_staging(self, staging: str) -> None:
        """Remove the staging area of a write that succeeded."""
        self._call(f"removing {staging!r}", lambda: self.inner.discard_staging(staging))

    def link(self, source: str, key: str) -> None:
        """Publish at ``key`` the bytes at ``source``."""
        self._call(f"linking {key!r} to {source!r}", lambda: self.inner.link(source, key))

    def prune(self, prefix: str) -> None:
        """Remove the empty folders under ``prefix``."""
        self._call(f"pruning {prefix!r}", lambda: self.inner.prune(prefix))

    def cleanup(self, staging: str, shard_prefix: str) -> int:
        """Remove every leftover of the write whose staging prefix is ``staging``."""
        return self._call(
            f"cleaning up {staging!r}", lambda: self.inner.cleanup(staging, shard_prefix)
        )
