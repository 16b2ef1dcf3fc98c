"""Reads of an OME-Zarr 0.4 source that stop at the size its metadata implies.

A source's files are untrusted: a chunk of a few KiB by its ``.zarray`` may
be stored as gigabytes (a sparse file costs its maker nothing). Every read
of a conversion is bounded before it is made:

* :func:`read_at_most` (documents, and the chunks a conversion copies as
  they are): the object's size first, refused by key when it is larger than
  the bound, then a ranged read of that many bytes;
* :class:`BoundedReadStore` (the levels that are decoded and written again,
  read through zarr-python): a zarr store wrapping the source's, whose reads
  of whole objects are ranged reads of one byte more than the bound, refused
  by key when that byte comes back.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterable
from typing import Self

from zarr.abc.store import ByteRequest, RangeByteRequest, Store
from zarr.core.buffer import Buffer, BufferPrototype
from zarr.storage import WrapperStore

from shardpipe.errors import InvalidArgumentError
from shardpipe.storage.base import ShardStore

__all__ = ["DOCUMENT", "MAX_DOCUMENT_NBYTES", "BoundedReadStore", "read_at_most", "too_large"]

MAX_DOCUMENT_NBYTES = 16 << 20
"""Most bytes a ``.zattrs``, ``.zarray`` or ``.zgroup`` of a source may hold."""

_DOCUMENTS = (".zarray", ".zattrs", ".zgroup", ".zmetadata")
DOCUMENT = "a metadata document may hold"
"""How :func:`too_large` ends for a document."""


def too_large(key: str, size: int | None, bound: int, what: str) -> InvalidArgumentError:
    """The error for the object at ``key``: more than ``bound`` bytes, which ``what`` may hold.

    ``size`` is its size, if known; ``what`` ends the sentence "more than
    the N bytes ..." (``"a metadata document may hold"``).
    """
    held = f"holds {size:,} bytes" if size is not None else "holds"
    return InvalidArgumentError(
        "source",
        f"{key!r} {held}, more than the {bound:,} bytes {what}; it was not read",
        "Repair or remove that file of the source (it is damaged, or was not written by a "
        "Zarr v2 writer), then convert again",
    )


def read_at_most(store: ShardStore, key: str, bound: int, what: str) -> bytes | None:
    """The bytes at ``key`` (None when absent), refused unread when more than ``bound``.

    ``what`` ends the message "more than the N bytes ..." (``"a chunk of
    shape (8, 8) of uint16 can take through its codecs"``).

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        Naming ``source`` and ``key``, when the object is larger than ``bound``.
    """
    size = store.size(key)
    if size is None:
        return None
    if size > bound:
        raise too_large(key, size, bound, what)
    if size == 0:
        return b""
    try:
        return store.get_range(key, 0, size)  # what it held when its size was read, at most
    except FileNotFoundError:
        return None


class BoundedReadStore(WrapperStore[Store]):
    """A read-only zarr store over a source's store, whose reads of whole objects are bounded.

    Parameters
    ----------
    store : zarr.abc.store.Store
        The source's store.
    chunk_bound : int
        Most bytes a chunk may hold (:attr:`~shardpipe.codec.v2_array.V2Array.stored_chunk_bound`).
    what : str
        How the message ends (``"... more than the N bytes {what}"``).

    Reads of metadata documents (``.zarray``, ``.zattrs``...) stop at
    :data:`MAX_DOCUMENT_NBYTES`. zarr reads a v2 array's objects whole
    (:meth:`get`, :meth:`get_sync`, :meth:`get_partial_values`); a read of
    a byte range is made as asked (the range bounds it).
    """

    def __init__(
        self, store: Store, chunk_bound: int = 0, what: str = "a chunk can take through its codecs"
    ) -> None:
        super().__init__(store)
        self.chunk_bound = chunk_bound
        self.what = what

    def _with_store(self, store: Store) -> Self:
        return type(self)(store, self.chunk_bound, self.what)

    def _bound(self, key: str) -> tuple[int, str]:
        if key.rsplit("/", 1)[-1] in _DOCUMENTS:
            return MAX_DOCUMENT_NBYTES, DOCUMENT
        return self.chunk_bound, self.what

    def _checked(self, key: str, value: Buffer | None, bound: int, what: str) -> Buffer | None:
        if value is not None and len(value) > bound:
            raise too_large(key, None, bound, what)
        return value

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        """The object at ``key``; a whole one is read up to one byte past its bound."""
        if byte_range is not None:
            return await self._store.get(key, prototype, byte_range)
        bound, what = self._bound(key)
        value = await self._store.get(key, prototype, RangeByteRequest(0, bound + 1))
        return self._checked(key, value, bound, what)

    def get_sync(
        self,
        key: str,
        *,
        prototype: BufferPrototype | None = None,
        byte_range: ByteRequest | None = None,
    ) -> Buffer | None:
        """As :meth:`get`, without an event loop (where the source's store can)."""
        if byte_range is not None:
            return super().get_sync(key, prototype=prototype, byte_range=byte_range)
        bound, what = self._bound(key)
        ranged = RangeByteRequest(0, bound + 1)
        value = super().get_sync(key, prototype=prototype, byte_range=ranged)
        return self._checked(key, value, bound, what)

    async def get_partial_values(
        self, prototype: BufferPrototype, key_ranges: Iterable[tuple[str, ByteRequest | None]]
    ) -> list[Buffer | None]:
        """Each ``(key, range)`` through :meth:`get`."""
        return [await self.get(key, prototype, byte_range) for key, byte_range in key_ranges]

    async def _get_many(
        self, requests: Iterable[tuple[str, BufferPrototype, ByteRequest | None]]
    ) -> AsyncGenerator[tuple[str, Buffer | None], None]:
        for key, prototype, byte_range in requests:
            yield key, await self.get(key, prototype, byte_range)
