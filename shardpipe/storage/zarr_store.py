"""Fallback backend: any zarr ``Store`` (for example ``MemoryStore``).

Whole shards go through ``Store.set``, which zarr's own stores implement
atomically per key. Parts are not supported: every shard must fit one task.
The buffers are joined into one object first (the memory model counts that
copy).

Conditional publishes:

* create-only goes through ``Store.set_if_not_exists``, atomic in zarr's
  memory, local, zip and obstore stores. It does not say whether it wrote,
  so the object is read back: if it holds other bytes, another writer was
  first (a racing writer of the very same bytes is not told apart: both
  succeed, and the object is what each of them wanted). A store that keeps
  zarr's default ``set_if_not_exists`` (an existence check, then ``set``;
  ``FsspecStore`` among them) is declared without ``create_only``;
* replace-if-unchanged compares the SHA-256 of the bytes just before
  ``Store.set``: zarr's store interface has no compare-and-swap, so a write
  between the check and the set goes unnoticed.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Buffer, Iterator, Sequence

from zarr.abc.store import RangeByteRequest, Store
from zarr.storage import WrapperStore

from shardpipe.errors import ConditionFailedError
from shardpipe.internals.zarr_core import default_buffer_prototype, sync
from shardpipe.storage.base import ObjectVersion, ShardStore, StoreAbilities
from shardpipe.storage.keys import edge_key


def content_version(data: bytes) -> str:
    """The version (:data:`~shardpipe.storage.base.ObjectVersion`) of bytes: a SHA-256."""
    return hashlib.sha256(data).hexdigest()


def _atomic_create(store: Store) -> bool:
    """Whether ``store`` (or the store it wraps) implements ``set_if_not_exists`` itself."""
    while isinstance(store, WrapperStore):
        store = store._store
    return type(store).set_if_not_exists is not Store.set_if_not_exists


class ZarrShardStore(ShardStore):
    """Shards written through a zarr ``Store``.

    Parameters
    ----------
    store : zarr.abc.store.Store
        The store; keys are relative to its root.
    """

    abilities = StoreAbilities(create_only=True, joins_buffers=True)

    def __init__(self, store: Store) -> None:
        self.store = store
        if not _atomic_create(store):
            self.abilities = dataclasses.replace(type(self).abilities, create_only=False)

    def __repr__(self) -> str:
        return f"ZarrShardStore({self.store!r})"

    def put(
        self,
        key: str,
        buffers: Sequence[Buffer],
        *,
        if_absent: bool = False,
        if_version: ObjectVersion | None = None,
    ) -> None:
        """Publish the concatenation of ``buffers`` at ``key`` with ``Store.set``.

        With ``if_absent`` through ``Store.set_if_not_exists``; with
        ``if_version`` after comparing the SHA-256 of the bytes at ``key``.
        """
        edge_key(key, self)
        if if_absent and if_version is not None:
            raise ValueError("if_absent and if_version exclude each other")
        data = b"".join(memoryview(b).cast("B") for b in buffers)
        value = default_buffer_prototype().buffer.from_bytes(data)
        if if_absent:
            if (found := self.version(key)) is None:
                sync(self.store.set_if_not_exists(key, value))
                now = self.get(key)
                if now == data:
                    return
                found = None if now is None else content_version(now)
            raise self._condition_failed(key, "no object (create-only write)", found)
        if if_version is not None and (found := self.version(key)) != if_version:
            raise self._condition_failed(key, f"version {if_version}", found)
        sync(self.store.set(key, value))

    def _condition_failed(
        self, key: str, expected: str, found: ObjectVersion | None
    ) -> ConditionFailedError:
        described = "no object" if found is None else f"version {found}"
        return ConditionFailedError(
            f"{key!r} in {self.store}: expected {expected}, found {described}; nothing was written"
        )

    def get(self, key: str) -> bytes | None:
        """Return the bytes at ``key``, or ``None`` when absent."""
        edge_key(key, self)
        value = sync(self.store.get(key, prototype=default_buffer_prototype()))
        return None if value is None else value.to_bytes()

    def get_range(self, key: str, start: int, stop: int) -> bytes:
        """Return ``[start, stop)`` of the object at ``key``, reading only those bytes."""
        edge_key(key, self)
        if stop <= start:
            if self.size(key) is None:
                raise FileNotFoundError(key)
            return b""
        request = RangeByteRequest(start, stop)
        value = sync(self.store.get(key, prototype=default_buffer_prototype(), byte_range=request))
        if value is None:
            raise FileNotFoundError(key)
        return value.to_bytes()

    def version(self, key: str) -> ObjectVersion | None:
        """Return a SHA-256 of the bytes at ``key``, or ``None`` when absent."""
        data = self.get(key)
        return None if data is None else content_version(data)

    def size(self, key: str) -> int | None:
        """Return the size of the object at ``key``, or ``None`` when absent."""
        edge_key(key, self)
        if not sync(self.store.exists(key)):
            return None
        return int(sync(self.store.getsize(key)))

    def delete(self, key: str) -> None:
        """Remove ``key`` if present."""
        sync(self.store.delete(edge_key(key, self)))

    def list(self, prefix: str) -> Iterator[str]:
        """Iterate over the keys that start with ``prefix`` (a plain string prefix), in order.

        Some zarr stores (``LocalStore``) take ``list_prefix``'s prefix as a
        folder, so the folder holding ``prefix`` is listed and filtered; the
        keys are collected and sorted as strings. A listed key that could
        lead outside the store (a ``MemoryStore`` holds any string) is refused.
        """
        folder = edge_key(prefix, self, prefix=True).rpartition("/")[0]

        async def collect() -> list[str]:
            return [k async for k in self.store.list_prefix(folder) if k.startswith(prefix)]

        yield from sorted(edge_key(key, self) for key in sync(collect()))
