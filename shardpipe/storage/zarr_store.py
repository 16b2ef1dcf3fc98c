"""Fallback backend: any zarr ``Store`` (for example ``MemoryStore``).

Whole shards go through ``Store.set``, which zarr's own stores implement
atomically per key. Parts are not supported: every shard must fit one task.
Conditional publishes are checked just before ``Store.set`` (zarr's store
interface has no compare-and-swap), and the buffers are joined into one
object first (the memory model counts that copy).
"""

from __future__ import annotations

import hashlib
from collections.abc import Buffer, Iterator, Sequence

from zarr.abc.store import Store
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

from shardpipe.errors import ConditionFailedError
from shardpipe.storage.base import ObjectVersion, ShardStore, StoreAbilities


class ZarrShardStore(ShardStore):
    """Shards written through a zarr ``Store``.

    Parameters
    ----------
    store : zarr.abc.store.Store
        The store; keys are relative to its root.
    """

    abilities = StoreAbilities(joins_buffers=True)

    def __init__(self, store: Store) -> None:
        self.store = store

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
        """Publish the concatenation of ``buffers`` at ``key`` with ``Store.set``."""
        if if_absent and if_version is not None:
            raise ValueError("if_absent and if_version exclude each other")
        if if_absent or if_version is not None:
            current = self.version(key)
            if (if_absent and current is not None) or (not if_absent and current != if_version):
                raise ConditionFailedError(
                    f"{key!r} in {self.store} is at version {current}, the write expected "
                    f"{'none' if if_absent else if_version}; nothing was written"
                )
        data = b"".join(memoryview(b).cast("B") for b in buffers)
        sync(self.store.set(key, default_buffer_prototype().buffer.from_bytes(data)))

    def get(self, key: str) -> bytes | None:
        """Return the bytes at ``key``, or ``None`` when absent."""
        value = sync(self.store.get(key, prototype=default_buffer_prototype()))
        return None if value is None else value.to_bytes()

    def version(self, key: str) -> ObjectVersion | None:
        """Return a SHA-256 of the bytes at ``key``, or ``None`` when absent."""
        data = self.get(key)
        return None if data is None else hashlib.sha256(data).hexdigest()

    def size(self, key: str) -> int | None:
        """Return the size of the object at ``key``, or ``None`` when absent."""
        if not sync(self.store.exists(key)):
            return None
        return int(sync(self.store.getsize(key)))

    def delete(self, key: str) -> None:
        """Remove ``key`` if present."""
        sync(self.store.delete(key))

    def list(self, prefix: str) -> Iterator[str]:
        """Iterate over the keys that start with ``prefix``."""

        async def collect() -> list[str]:
            return [k async for k in self.store.list_prefix(prefix)]

        yield from sync(collect())
