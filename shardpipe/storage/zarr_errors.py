"""zarr's own writes, failing as shardpipe's: a full disk is a ``StorageFullError`` naming the key.

shardpipe publishes shards and its records through its backends, whose
permanent faults the retry layer (:mod:`shardpipe.storage.retry`) raises as
:class:`~shardpipe.errors.StorageFullError` or
:class:`~shardpipe.errors.StorageAccessError` with the key. Group and array
metadata, attributes, and what xarray writes (coordinates, unsharded
variables, consolidated metadata) go through zarr instead, whose stores
raise the bare ``OSError`` (``[Errno 28] No space left on device``, no key).
Writers hand zarr :func:`with_storage_errors` of their store
(:attr:`~shardpipe.storage.resolve.ResolvedStore.zarr_store_for_writes`):
the same store, whose writes and deletes fail as the backends' do.

Only permanent faults are translated (:func:`~shardpipe.storage.errnos.permanent_error`);
anything else passes through as zarr raised it. An Icechunk store is
returned as it is: its writes go into a session, and its faults are its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from zarr.abc.store import Store
from zarr.storage import WrapperStore

from shardpipe.internals.zarr_core import Buffer
from shardpipe.storage.errnos import explained
from shardpipe.storage.icechunk.store import is_icechunk

__all__ = ["StorageErrorsStore", "with_storage_errors"]


class StorageErrorsStore(WrapperStore[Store]):
    """A zarr store whose permanent write faults are shardpipe's storage errors, naming the key.

    Reads, listings and everything else are the wrapped store's.

    Parameters
    ----------
    store : zarr.abc.store.Store
        The store zarr writes through.
    """

    def __init__(self, store: Store) -> None:
        super().__init__(store)

    def __str__(self) -> str:
        return str(self._store)

    def __repr__(self) -> str:
        return f"StorageErrorsStore({self._store!r})"

    @property
    def supports_consolidated_metadata(self) -> bool:
        """As the wrapped store's."""
        return bool(getattr(self._store, "supports_consolidated_metadata", True))

    async def set(self, key: str, value: Buffer) -> None:
        """As the wrapped store's."""
        with explained(f"writing {key!r}"):
            await self._store.set(key, value)

    async def set_if_not_exists(self, key: str, value: Buffer) -> None:
        """As the wrapped store's."""
        with explained(f"writing {key!r}"):
            await self._store.set_if_not_exists(key, value)

    async def _set_many(self, values: Iterable[tuple[str, Buffer]]) -> None:
        await asyncio.gather(*(self.set(key, value) for key, value in values))

    def set_sync(self, key: str, value: Buffer) -> None:
        """As the wrapped store's."""
        with explained(f"writing {key!r}"):
            super().set_sync(key, value)

    async def delete(self, key: str) -> None:
        """As the wrapped store's."""
        with explained(f"deleting {key!r}"):
            await self._store.delete(key)

    def delete_sync(self, key: str) -> None:
        """As the wrapped store's."""
        with explained(f"deleting {key!r}"):
            super().delete_sync(key)

    async def delete_dir(self, prefix: str) -> None:
        """As the wrapped store's."""
        with explained(f"deleting {prefix!r}"):
            await self._store.delete_dir(prefix)


def with_storage_errors(store: Store) -> Store:
    """``store``, its permanent write faults raised as shardpipe's errors (see the module).

    Parameters
    ----------
    store : zarr.abc.store.Store
        The store zarr is to write through.

    Returns
    -------
    zarr.abc.store.Store
        A :class:`StorageErrorsStore` around it; ``store`` itself when it is
        one already or an Icechunk store.
    """
    if isinstance(store, StorageErrorsStore) or is_icechunk(store):
        return store
    return StorageErrorsStore(store)
