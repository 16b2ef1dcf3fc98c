"""Stores that answer a second read from the first, until something changes.

``verify`` and ``info`` ask for the same ``zarr.json`` from several layers (is it
there, is it a draft array's, a group's, what does it hold...): on an object
store each asked is a round trip in a row; so is the job record, which three
checks read. :class:`RememberedDocuments` wraps the backend for one such call
and answers the second ask from the first: a point in time for the metadata
and the job's records, as a reader that reads them once would see them.
Shards, the records in the job folder's own folders and listings are read as
they are.

A job starting a new array lists the array twice in a row under its marker
(its recovery looks for undo records, then the target is checked for what
else is there). :class:`RememberedListing` lists the array's keys once and
answers both. Either way, any call that changes storage through the wrapper
forgets what was remembered.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

from shardpipe.storage.delegating import DelegatingStore
from shardpipe.storage.keys import JOB_DIR
from shardpipe.storage.resolve import ResolvedStore

DOCUMENTS = frozenset({"zarr.json", ".zarray", ".zgroup", ".zattrs", "info"})
"""The names of the node documents remembered: Zarr v3 and v2 metadata, a precomputed ``info``."""

_READS = frozenset({"get", "get_within", "get_into", "get_range", "size", "version", "list"})


def _document(key: str) -> bool:
    """Whether ``key`` is a node document or a record right in a job folder."""
    folder, _, name = key.rpartition("/")
    return name in DOCUMENTS or (folder.rpartition("/")[2] == JOB_DIR and name.endswith(".json"))


class RememberedDocuments(DelegatingStore):
    """``inner``, whose node documents and job records are read once (their size, their bytes).

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


class RememberedListing(DelegatingStore):
    """``inner``, whose keys under ``root`` are listed once, for the listings until a change.

    The first listing of a prefix under ``root`` lists all of ``root`` and
    keeps the keys; the later listings under ``root`` are answered from
    them until a call changes storage. From then on every call goes to
    ``inner`` as it is: ``root`` is listed whole at most once. Made for the
    few calls of a job's start, on an array that is empty or about to be
    listed whole anyway; the keys are sorted once more on the way in (cheap
    on a sorted listing), so that a prefix is found by bisection.

    Parameters
    ----------
    inner : ShardStore
        The backend doing the work.
    root : str
        The key prefix whose listing is remembered (``""``: every key).
    """

    def __init__(self, inner: Any, root: str) -> None:
        super().__init__(inner)
        self.root = root
        self._keys: list[str] | None = None
        self._spent = False

    def _forward[T](self, method: str, call: Callable[[], T]) -> T:
        if method not in _READS and self._keys is not None:  # a change after the listing
            self._keys = None
            self._spent = True
        return call()

    def list(self, prefix: str) -> Iterator[str]:
        """The keys that start with ``prefix``, sorted (under ``root``: see above)."""
        if self._spent or not prefix.startswith(self.root):
            return super().list(prefix)
        if self._keys is None:
            self._keys = sorted(super().list(self.root))
        keys = self._keys
        first = end = bisect_left(keys, prefix)
        while end < len(keys) and keys[end].startswith(prefix):
            end += 1
        return iter(keys[first:end])  # a copy: the keys are dropped at the next change


def listing_once(target: ResolvedStore) -> ResolvedStore:
    """``target`` whose node's keys are listed once for a job's start (:class:`RememberedListing`).

    ``target`` itself where that saves nothing or would be wrong: a
    transaction (an Icechunk session answers listings of shardpipe's records
    from its own scratch space, not from a listing of the node) and a store
    that leaves temporary files (a local disk: the recovery removes those
    of dead processes, a change, before the target is checked).
    """
    shards = target.shards
    if target.transactional or shards.abilities.leaves_temporaries:
        return target
    return replace(target, shards=RememberedListing(shards, target.key("")))
