"""A store that reads each node document once: a read-only job's view of the metadata.

``verify`` and ``info`` ask for the same ``zarr.json`` from several layers (is it
there, is it a draft array's, a group's, what does it hold...): on an object
store each asked is a round trip in a row. :class:`RememberedDocuments` wraps
the backend for one such call and answers the second ask from the first: a
point in time for the metadata, as a reader that reads it once would see it.
Shards, records and listings are read as they are; any call that changes
storage forgets what was remembered.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from shardpipe.storage.delegating import DelegatingStore
from shardpipe.storage.resolve import ResolvedStore

DOCUMENTS = frozenset({"zarr.json", ".zarray", ".zgroup", ".zattrs", "info"})
"""The names of the node documents remembered: Zarr v3 and v2 metadata, a precomputed ``info``."""

_READS = frozenset({"get", "get_within", "get_range", "size", "version", "list"})


def _document(key: str) -> bool:
    return key.rpartition("/")[2] in DOCUMENTS


class RememberedDocuments(DelegatingStore):
    """``inner``, whose node documents are read once (their size, their bytes).

    Parameters
    ----------
    inner : ShardStore
        The backend doing the work.
    """

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self._seen: dict[tuple[str, str, int], Any] = {}

    def _forward[T](self, method: str, call: Callable[[], T]) -> T:
        if method not in _READS:  # a change: what was read may be stale now
            self._seen.clear()
        return call()

    def _remembered[T](self, what: tuple[str, str, int], read: Callable[[], T]) -> T:
        if what not in self._seen:
            self._seen[what] = read()
        found: T = self._seen[what]
        return found

    def get(self, key: str) -> bytes | None:
        """The bytes at ``key`` (a node document's read once), or None."""
        if not _document(key):
            return super().get(key)
        return self._remembered(("get", key, 0), lambda: super(RememberedDocuments, self).get(key))

    def get_within(self, key: str, limit: int) -> tuple[int, bytes | None] | None:
        """See :meth:`~shardpipe.storage.base.ShardStore.get_within` (a document's read once)."""
        if not _document(key):
            return super().get_within(key, limit)
        return self._remembered(
            ("get_within", key, limit),
            lambda: super(RememberedDocuments, self).get_within(key, limit),
        )

    def size(self, key: str) -> int | None:
        """The size of the object at ``key`` (a node document's asked once), or None."""
        if not _document(key):
            return super().size(key)
        return self._remembered(
            ("size", key, 0), lambda: super(RememberedDocuments, self).size(key)
        )


def remembering(target: ResolvedStore) -> ResolvedStore:
    """``target`` whose backend reads each node document once (:class:`RememberedDocuments`)."""
    return replace(target, shards=RememberedDocuments(target.shards))
