"""zarr's ``LocalStore``, kept inside its root: the zarr half of every local path shardpipe opens.

shardpipe reads and writes metadata, and zarr-python reads arrays and walks
groups, through a zarr store; for a local path that store is this one.
Every key it is given goes through the same checks as the keys of
:class:`~shardpipe.storage.local.store.LocalShardStore`
(:mod:`shardpipe.storage.local.keys`): no ``..`` or absolute keys, no
folder that leads out of the root through a link, no file at a key that
is a link. A refused key raises :class:`~shardpipe.errors.UnsafeKeyError`
before the file system is touched. Listings do not enter linked folders
(as zarr's own do not); a link listed by name is refused when it is read.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterable
from typing import Any

from zarr.abc.store import ByteRequest, OffsetByteRequest, RangeByteRequest, SuffixByteRequest
from zarr.storage import LocalStore

from shardpipe.internals.zarr_core import Buffer, BufferPrototype, default_buffer_prototype
from shardpipe.storage.errnos import explained
from shardpipe.storage.local.file_io import read_at
from shardpipe.storage.local.keys import LocalKeys


class ContainedLocalStore(LocalStore):
    """A zarr ``LocalStore`` that never reads, writes or lists outside its root.

    Parameters
    ----------
    root : str or Path
        The root folder.
    read_only : bool
        Whether the store is read-only.
    """

    @property
    def _local_keys(self) -> LocalKeys:
        keys = self.__dict__.get("_shardpipe_keys")
        if keys is None or keys.root != os.path.abspath(self.root):
            keys = LocalKeys(os.path.abspath(self.root), self)
            self.__dict__["_shardpipe_keys"] = keys
        return keys

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_shardpipe_keys", None)
        return state

    def _file(self, key: str) -> None:
        """Refuse ``key`` if it leads outside the root or its file is a link."""
        self._local_keys.no_link(key)

    def _folder(self, prefix: str) -> None:
        """Refuse ``prefix`` if its folder leads outside the root."""
        self._local_keys.folder(prefix)

    def get_sync(
        self,
        key: str,
        *,
        prototype: BufferPrototype | None = None,
        byte_range: ByteRequest | None = None,
    ) -> Buffer | None:
        """As zarr's, the file opened with ``O_NOFOLLOW`` (no call more than zarr makes)."""
        self._ensure_open_sync()
        return _read(self._local_keys, key, prototype or default_buffer_prototype(), byte_range)

    def set_sync(self, key: str, value: Buffer) -> None:
        """As zarr's, after the checks."""
        self._local_keys.path(key)
        super().set_sync(key, value)

    def delete_sync(self, key: str) -> None:
        """As zarr's, after the checks."""
        self._local_keys.path(key)
        super().delete_sync(key)

    async def get(
        self,
        key: str,
        prototype: BufferPrototype | None = None,
        byte_range: ByteRequest | None = None,
    ) -> Buffer | None:
        """As zarr's, the file opened with ``O_NOFOLLOW`` (no call more than zarr makes)."""
        await self._ensure_open()
        prototype = prototype or default_buffer_prototype()
        return await asyncio.to_thread(_read, self._local_keys, key, prototype, byte_range)

    async def get_partial_values(
        self,
        prototype: BufferPrototype,
        key_ranges: Iterable[tuple[str, ByteRequest | None]],
    ) -> list[Buffer | None]:
        """As zarr's, after the checks of every key."""
        ranges = list(key_ranges)
        for key, _ in ranges:
            self._file(key)
        return await super().get_partial_values(prototype, ranges)

    async def _set(self, key: str, value: Buffer, exclusive: bool = False) -> None:
        self._local_keys.path(key)
        await super()._set(key, value, exclusive=exclusive)

    async def delete(self, key: str) -> None:
        """As zarr's, after the checks."""
        self._local_keys.path(key)
        await super().delete(key)

    async def delete_dir(self, prefix: str) -> None:
        """As zarr's, after the checks."""
        self._folder(prefix)
        await super().delete_dir(prefix)

    async def exists(self, key: str) -> bool:
        """As zarr's, after the checks."""
        self._file(key)
        return await super().exists(key)

    async def getsize(self, key: str) -> int:
        """As zarr's, after the checks."""
        self._file(key)
        return await super().getsize(key)

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        """As zarr's, after the checks (linked folders are not entered)."""
        self._folder(prefix)
        async for key in super().list_prefix(prefix):
            yield key

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        """As zarr's, after the checks."""
        self._folder(prefix)
        async for name in super().list_dir(prefix):
            yield name


def _read(
    keys: LocalKeys, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None
) -> Buffer | None:
    """The bytes (or ``byte_range``) of the file of ``key``; None when there is no file.

    A permanent fault of the file system (``EIO``) is the
    :class:`~shardpipe.errors.StorageError` naming ``key`` that shardpipe's
    own reads raise (:func:`~shardpipe.storage.errnos.permanent_error`).
    """
    with explained(f"reading {key!r}"):
        return _read_file(keys, key, prototype, byte_range)


def _read_file(
    keys: LocalKeys, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None
) -> Buffer | None:
    """:func:`_read`, faults as the file system raises them."""
    path = keys.path(key)
    try:
        fd = keys.open(key, path, os.O_RDONLY)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        size = os.fstat(fd).st_size
        if byte_range is None:
            start, stop = 0, size
        elif isinstance(byte_range, RangeByteRequest):
            start, stop = byte_range.start, byte_range.end
        elif isinstance(byte_range, OffsetByteRequest):
            start, stop = byte_range.offset, size
        elif isinstance(byte_range, SuffixByteRequest):
            start, stop = max(0, size - byte_range.suffix), size
        else:
            raise TypeError(f"Unexpected byte_range, got {byte_range}.")
        chunks, position = [], start
        while position < stop:
            chunk = read_at(fd, position, stop)
            if not chunk:
                break
            chunks.append(chunk)
            position += len(chunk)
    except IsADirectoryError:
        return None
    finally:
        os.close(fd)
    return prototype.buffer.from_bytes(b"".join(chunks))


def contained(source: Any, *, read_only: bool = True) -> Any:
    """A local path (``str``, ``os.PathLike``, ``file://``) as a :class:`ContainedLocalStore`.

    For sources that zarr or xarray open by themselves: a local path then
    gets the same checks as a target. Anything else (a URL, a store, an
    array) is returned unchanged.

    Parameters
    ----------
    source : object
        What the caller passed.
    read_only : bool
        Open the store read-only (the default: sources are only read).
    """
    if isinstance(source, str | os.PathLike):
        text = os.fspath(source)
        if "://" not in text or text.startswith("file://"):
            root = os.path.abspath(text.removeprefix("file://"))
            return ContainedLocalStore(root, read_only=read_only)
    return source
