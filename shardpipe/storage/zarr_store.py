"""Fallback backend: any zarr ``Store`` (for example ``MemoryStore``).

Whole shards go through ``Store.set``, which zarr's own stores implement
atomically per key. Parts are not supported: every shard must fit one task.
"""

from __future__ import annotations

from collections.abc import Buffer, Iterator, Sequence

from zarr.abc.store import Store
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

from shardpipe.storage.base import ShardStore


class ZarrShardStore(ShardStore):
    """Shards written through a zarr ``Store``.

    Parameters
    ----------
    store : zarr.abc.store.Store
        The store; keys are relative to its root.
    """

    def __init__(self, store: Store) -> None:
        self.store = store

    def __repr__(self) -> str:
        return f"ZarrShardStore({self.store!r})"

    def put(self, key: str, buffers: Sequence[Buffer]) -> None:
        """Publish the concatenation of ``buffers`` at ``key`` with ``Store.set``."""
        data = b"".join(memoryview(b).cast("B") for b in buffers)
        sync(self.store.set(key, default_buffer_prototype().buffer.from_bytes(data)))

    def get(self, key: str) -> bytes | None:
        """Return the bytes at ``key``, or ``None`` when absent."""
        value = sync(self.store.get(key, prototype=default_buffer_prototype()))
        return None if value is None else value.to_bytes()

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
