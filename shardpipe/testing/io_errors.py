"""Fault injection for tests: positioned writes that fail part way, as a failing device does.

:class:`DeviceErrorStore` wraps a backend that can write in place and makes
chosen positioned writes (``write_ranges``, ``write_at``, ``append``,
``truncate``, counted together from 1) fail with ``EIO``. A failing
``write_ranges`` first writes some of its bytes (every range but the last,
and the first half of the last), so the object is left torn, as after a
real I/O error in the middle of an update. With ``sticky``, every later
positioned write to a key that failed fails too (a bad sector), so that
putting the old bytes back fails as well, until :meth:`DeviceErrorStore.heal`.

Put it under the retry layer, as the backend itself would be (``EIO`` is not
retried)::

    store = DeviceErrorStore(LocalShardStore(path), fail={2})
    target = ResolvedStore(zarr.storage.LocalStore(path), RetryingStore(store), "")
"""

from __future__ import annotations

import errno
import threading
from collections.abc import Buffer, Callable, Collection, Sequence
from typing import Any, TypeVar

from shardpipe.storage.base import ShardStore
from shardpipe.storage.delegating import DelegatingStore

T = TypeVar("T")


class DeviceErrorStore(DelegatingStore):
    """A backend wrapper whose chosen positioned writes fail with ``EIO`` part way.

    Every other call is forwarded to the backend as it is.

    Parameters
    ----------
    inner : ShardStore
        The real backend (it must write in place).
    fail : collection of int
        Numbers (from 1) of the positioned writes that fail.
    sticky : bool
        After a key's write failed, every later positioned write to it fails.

    Attributes
    ----------
    failed : list of str
        The keys whose writes failed, in order.
    """

    def __init__(self, inner: ShardStore, *, fail: Collection[int], sticky: bool = False) -> None:
        super().__init__(inner)
        self.fail = frozenset(fail)
        self.sticky = sticky
        self.failed: list[str] = []
        self._positioned = 0
        self._dead: set[str] = set()
        self._count_lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["_count_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._count_lock = threading.Lock()

    def heal(self) -> None:
        """Let every key be written again (the bad sectors were replaced)."""
        with self._count_lock:
            self._dead.clear()

    def _fails(self, key: str) -> bool:
        with self._count_lock:
            self._positioned += 1
            if self._positioned in self.fail or key in self._dead:
                self.failed.append(key)
                if self.sticky:
                    self._dead.add(key)
                return True
            return False

    @staticmethod
    def _error(key: str) -> OSError:
        return OSError(errno.EIO, f"Input/output error (injected, writing {key!r})")

    def _positioned_write(self, key: str, call: Callable[[], T]) -> T:
        if self._fails(key):
            raise self._error(key)
        return call()

    def write_ranges(self, key: str, ranges: Sequence[tuple[int, Sequence[Buffer]]]) -> None:
        """Write ``ranges``; a failing call writes part of them first, then raises ``EIO``."""
        if not self._fails(key):
            self.inner.write_ranges(key, ranges)
            return
        *whole, (offset, buffers) = ranges
        data = b"".join(memoryview(b).cast("B") for b in buffers)
        torn = [*whole, (offset, [data[: len(data) // 2]])]
        self.inner.write_ranges(key, [r for r in torn if any(memoryview(b).nbytes for b in r[1])])
        raise self._error(key)

    def write_at(self, key: str, offset: int, buffers: Sequence[Buffer]) -> None:
        """See :meth:`ShardStore.write_at` (fails before writing)."""
        self._positioned_write(key, lambda: self.inner.write_at(key, offset, buffers))

    def append(self, key: str, buffers: Sequence[Buffer]) -> int:
        """See :meth:`ShardStore.append` (fails before writing)."""
        return self._positioned_write(key, lambda: self.inner.append(key, buffers))

    def truncate(self, key: str, size: int) -> None:
        """See :meth:`ShardStore.truncate` (fails before writing)."""
        self._positioned_write(key, lambda: self.inner.truncate(key, size))
