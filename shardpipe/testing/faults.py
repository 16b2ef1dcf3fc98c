"""Fault injection for tests: a storage backend that fails on purpose.

:class:`FaultyStore` wraps any :class:`~shardpipe.storage.base.ShardStore`
and makes a seeded share of its calls fail, in the ways real storage fails:

* ``"transient"``: the call fails before reaching the backend, with an
  error a retry may cure (``EAGAIN``, or a
  :class:`~shardpipe.errors.TransientStorageError`);
* ``"lost"``: the call reaches the backend and succeeds there, but its
  answer is lost (an object store that applied a PUT whose response never
  arrived): the caller sees a transient error and must cope with a retry of
  something that already happened;
* ``"full"``: from the ``full_after``-th write on, every write fails with
  ``ENOSPC``, as a disk that filled up.

Put it under the retry layer, as the backend itself would be::

    from shardpipe.storage.resolve import ResolvedStore
    from shardpipe.storage.retry import RetryingStore

    faulty = FaultyStore(LocalShardStore(path), share=0.2, seed=1)
    target = ResolvedStore(zarr.storage.LocalStore(path), RetryingStore(faulty), "")
    shardpipe.to_sharded_zarr(arr, target)

Counters (``FaultyStore.injected``) say what was done. A ``FaultyStore``
pickles with its settings; on a cluster each worker's copy draws its own
faults.
"""

from __future__ import annotations

import errno
import random
import threading
from collections import Counter
from collections.abc import Buffer, Callable, Iterable, Iterator, Sequence
from typing import Any

from shardpipe.errors import TransientStorageError
from shardpipe.storage.base import ObjectVersion, ShardStore
from shardpipe.storage.delegating import DelegatingStore
from shardpipe.storage.parts import PartReceipt, PartsHandle

WRITES = frozenset(
    {"put", "write_at", "write_ranges", "append", "truncate", "write_part", "copy_part"}
)
"""Calls that change stored bytes (the ones ``full_after`` counts)."""

NEVER_FAILED = frozenset({"collecting", "merge_changes", "make_durable"})
"""Calls forwarded without a draw: a task's whole body and the client's merge (no storage
calls of their own), and making durable what zarr wrote (not a write of shardpipe's)."""


class FaultyStore(DelegatingStore):
    """A backend wrapper failing a seeded share of calls.

    Every call of :class:`~shardpipe.storage.base.ShardStore` but those in
    :data:`NEVER_FAILED` draws once, in ``_forward``.

    Parameters
    ----------
    inner : ShardStore
        The real backend.
    share : float
        Probability that a call fails (each call draws once).
    kinds : sequence of str
        Ways to fail, drawn uniformly: ``"transient"`` and ``"lost"``.
    calls : collection of str, optional
        Method names that may fail (default: every one).
    full_after : int, optional
        After this many successful writes, every write fails with ``ENOSPC``.
    seed : int
        Seed of the draws.
    every : int, optional
        Instead of drawing: fail every ``every``-th call that may fail (a
        count the test can rely on), with a ``"transient"`` fault.
    """

    def __init__(
        self,
        inner: ShardStore,
        *,
        share: float = 0.1,
        kinds: Sequence[str] = ("transient", "lost"),
        calls: frozenset[str] | None = None,
        full_after: int | None = None,
        seed: int = 0,
        every: int | None = None,
    ) -> None:
        unknown = set(kinds) - {"transient", "lost"}
        if unknown or not 0 <= share <= 1:
            raise ValueError(f"kinds {sorted(unknown)} unknown or share {share} not in [0, 1]")
        super().__init__(inner)
        self.share = share
        self.kinds = tuple(kinds)
        self.calls = calls
        self.full_after = full_after
        self.seed = seed
        self.every = every
        self._eligible = 0
        self.injected: Counter[str] = Counter()
        self._writes = 0
        self._lock = threading.Lock()
        self._rng = random.Random(seed)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"FaultyStore({self.inner!r}, share={self.share}, kinds={self.kinds})"

    def _draw(self, name: str) -> str | None:
        with self._lock:
            full = self.full_after is not None and self._writes >= self.full_after
            if name in WRITES and full:
                self.injected["full"] += 1
                return "full"
            if self.calls is not None and name not in self.calls:
                return None
            if self.every is not None:
                self._eligible += 1
                if self._eligible % self.every:
                    return None
                self.injected["transient"] += 1
                return "transient"
            if self._rng.random() >= self.share:
                return None
            kind = self._rng.choice(self.kinds)
            self.injected[kind] += 1
            return kind

    def _forward[T](self, method: str, call: Callable[[], T]) -> T:
        """Make ``call`` (the ``ShardStore`` method ``method``), or fail as drawn."""
        if method in NEVER_FAILED:
            return call()
        kind = self._draw(method)
        if kind == "full":
            raise OSError(errno.ENOSPC, "No space left on device (injected)")
        if kind == "transient":
            if self._rng.random() < 0.5:
                raise OSError(errno.EAGAIN, f"injected transient fault in {method}")
            raise TransientStorageError(f"injected transient fault in {method} (HTTP 503)")
        result = call()
        if method in WRITES:
            with self._lock:
                self._writes += 1
        if kind == "lost":
            raise TransientStorageError(f"injected: the answer to {method} was lost")
        return result

    def put_streamed(self, key: str, buffers: Iterable[Buffer]) -> int:
        """Collect ``buffers``, then ``put`` them (where the call draws), as a plain backend.

        See :meth:`~shardpipe.storage.base.ShardStore.put_streamed`.
        """
        return ShardStore.put_streamed(self, key, buffers)

    def list(self, prefix: str) -> Iterator[str]:
        """List, all of it within the call that draws.

        See :meth:`~shardpipe.storage.base.ShardStore.list`.
        """
        return iter(self._forward("list", lambda: list(self.inner.list(prefix))))

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
        """Finish the parts; fails only before publishing (see below).

        See :meth:`~shardpipe.storage.base.ShardStore.finish_parts`.

        A lost answer after publishing is not injected here: a backend can
        tell a completed upload from a failed one (the S3 backend checks),
        and the wrapper cannot.
        """
        kind = self._draw("finish_parts")
        if kind == "full":
            raise OSError(errno.ENOSPC, "No space left on device (injected)")
        if kind is not None:
            raise TransientStorageError("injected transient fault in finish_parts")
        self.inner.finish_parts(
            handle, receipts, head, tail, if_absent=if_absent, if_version=if_version
        )
