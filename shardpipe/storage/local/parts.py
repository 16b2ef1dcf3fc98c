"""Shards written in parts on a local disk: the multipart half of the local backend.

Parts are separate files in a staging folder (one per shard, under the
write's staging prefix); ``finish_parts`` joins them into a temporary file
with ``os.copy_file_range`` (the kernel copies, the bytes never pass through
Python), then publishes it as
:meth:`~shardpipe.storage.local.store.LocalShardStore.put` does, and removes
the folder. ``copy_part`` fills a part from a byte range of an existing file
the same way. A part written again (a retry) replaces the earlier try.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Buffer, Callable, Sequence
from typing import TYPE_CHECKING

from shardpipe.storage.base import ObjectVersion, PartReceipt, PartsHandle
from shardpipe.storage.keys import edge_key
from shardpipe.storage.local.file_io import copy_into, write_all
from shardpipe.storage.local.writeback import Writeback

if TYPE_CHECKING:
    from shardpipe.storage.local.keys import LocalKeys


class LocalParts:
    """The parts methods of :class:`~shardpipe.storage.local.store.LocalShardStore`.

    A mixin: the store gives it its root's keys, ``fsync`` and the publishing
    of a temporary file at a key.
    """

    fsync: bool
    _keys: LocalKeys

    if TYPE_CHECKING:

        def _path(self, key: str) -> str: ...

        def _publish(
            self,
            key: str,
            write: Callable[[int], object],
            if_absent: bool = False,
            if_version: ObjectVersion | None = None,
        ) -> None: ...

    def _part_path(self, handle: PartsHandle, number: int) -> str:
        edge_key(handle.key, self)
        return os.path.join(self._keys.folder(handle.upload), f"part-{number:05d}")

    def begin_parts(self, key: str, staging: str) -> PartsHandle:
        """Create the staging folder of the shard at ``key``."""
        folder = f"{staging}/{edge_key(key, self).replace('/', '.')}"
        os.makedirs(self._keys.folder(folder), exist_ok=True)
        return PartsHandle(key, folder, staging)

    def write_part(
        self, handle: PartsHandle, number: int, buffers: Sequence[Buffer]
    ) -> PartReceipt:
        """Write part ``number`` to its own staging file (replacing an earlier try)."""
        path = self._part_path(handle, number)
        fd = self._keys.open(handle.upload, path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            size = write_all(fd, buffers)
        finally:
            os.close(fd)
        return PartReceipt(number, size)

    def copy_part(
        self, handle: PartsHandle, number: int, source: str, start: int, stop: int
    ) -> PartReceipt:
        """Fill part ``number`` with bytes ``[start, stop)`` of ``source`` (in the kernel)."""
        origin = self._path(source)
        path = self._part_path(handle, number)
        src = self._keys.open(source, origin, os.O_RDONLY)
        try:
            fd = self._keys.open(handle.upload, path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            try:
                copy_into(fd, src, origin, start, stop)
            finally:
                os.close(fd)
        finally:
            os.close(src)
        return PartReceipt(number, stop - start)

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
        """Join head, parts and tail into the shard file and remove the staging folder."""

        def join(fd: int) -> None:
            writeback = Writeback(fd, enabled=self.fsync)
            writeback.written(write_all(fd, [head]))
            for receipt in sorted(receipts, key=lambda r: r.number):
                path = self._part_path(handle, receipt.number)
                part = self._keys.open(handle.upload, path, os.O_RDONLY)
                try:
                    actual = os.fstat(part).st_size
                    if actual != receipt.size:
                        raise OSError(
                            f"part file {path} has {actual} bytes, expected {receipt.size}"
                        )
                    copy_into(fd, part, path)
                finally:
                    os.close(part)
                writeback.written(actual)
            write_all(fd, [tail])

        edge_key(handle.key, self)
        self._keys.folder(handle.upload)
        if receipts or head or tail:
            self._publish(handle.key, join, if_absent, if_version)
        self.abort_parts(handle)

    def abort_parts(self, handle: PartsHandle) -> None:
        """Remove the staging folder of ``handle``."""
        edge_key(handle.key, self)
        shutil.rmtree(self._keys.folder(handle.upload), ignore_errors=True)

    def discard_staging(self, staging: str) -> None:
        """Remove the staging folder of a finished write, and its parent if empty."""
        folder = self._keys.folder(staging)
        shutil.rmtree(folder, ignore_errors=True)
        with contextlib.suppress(OSError):  # still in use by another write, or gone
            os.rmdir(os.path.dirname(folder))
