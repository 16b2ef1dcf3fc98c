"""Shards written in parts on a local disk: the multipart half of the local backend.

Each shard written in parts has a staging folder (under the write's staging
prefix). How its parts are kept there depends on the handle:

* **in any order** (``begin_parts(..., any_order=True)``, a Zarr shard whose
  index says where each chunk lies): every process appends the parts it
  writes to a file of its own in the folder (``placed-<process>``), one after
  the other, under a lock of the process; the receipt says which file and
  where. ``finish_parts`` then renames its own process's file out of the
  writers' way (``finishing-<process>``), cuts it to what the parts take,
  appends the other processes' files and the tail, and publishes it as it
  is: the parts of the process that finishes the shard (all of them, on
  Dask's threads) are written once. With a head (an index at the start), or
  when the finishing process wrote no part, they are copied into a new file
  instead. A part written again (a retry) is appended anew; the earlier try
  stays in the file as bytes no index entry points to.
* **by number**: each part is a file of its own (``part-<number>``, a retry
  replaces it), and ``finish_parts`` joins head, parts and tail into a
  temporary file with ``os.copy_file_range`` (the kernel copies; the bytes
  never pass through Python) before publishing it.

Either way the object appears at its key in one step (a rename, or a link for
a create-only publish), as :meth:`~shardpipe.storage.local.store.LocalShardStore.put`
does, and the folder is removed. A process never writes to another's file, so
parts written by workers on several machines sharing a file system (NFS) need
no lock between them. ``copy_part`` fills a part from a byte range of an
existing file in the kernel.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import threading
import uuid
from collections.abc import Buffer, Callable, Sequence
from typing import TYPE_CHECKING

from shardpipe.storage.base import ObjectVersion
from shardpipe.storage.keys import edge_key
from shardpipe.storage.local.file_io import copy_into, write_all
from shardpipe.storage.local.versions import version_of
from shardpipe.storage.local.writeback import Writeback, start_writeback
from shardpipe.storage.parts import PartLayout, PartReceipt, PartsHandle, lay_out_parts

if TYPE_CHECKING:
    from shardpipe.storage.local.keys import LocalKeys

_STRIPES = 64


def _new_locks() -> list[threading.Lock]:
    return [threading.Lock() for _ in range(_STRIPES)]


_PLACING = _new_locks()
"""Locks of this process's placed files (by a hash of the path): one writer at a time."""


def _new_process_name() -> str:
    return f"placed-{os.getpid()}-{uuid.uuid4().hex[:12]}"


_process_name = _new_process_name()
"""The name of this process's placed file in each staging folder."""

_sealed: dict[str, ObjectVersion] = {}
"""Staging folder to the version of the object this process published from it, until
its parts are aborted: a retried ``finish_parts`` whose first try published finds it."""


def _after_fork() -> None:
    """A child names its own files, and no thread of its parent holds its locks."""
    global _process_name, _PLACING
    _process_name = _new_process_name()
    _PLACING = _new_locks()
    _sealed.clear()


os.register_at_fork(after_in_child=_after_fork)


_Span = tuple[str, int, bool]
"""A staging file's name, the bytes of it the object takes, whether that is all of it."""


def _lock(path: str) -> threading.Lock:
    return _PLACING[hash(path) % len(_PLACING)]


def _number(receipt: PartReceipt) -> int:
    return receipt.number


class LocalParts:
    """The parts methods of :class:`~shardpipe.storage.local.store.LocalShardStore`.

    A mixin: the store gives it its root's keys, ``fsync``, the sealing of a
    file and the publishing of a file at a key.
    """

    fsync: bool
    _keys: LocalKeys

    if TYPE_CHECKING:

        def _path(self, key: str) -> str: ...

        def _seal(self, fd: int) -> None: ...

        def version(self, key: str) -> ObjectVersion | None: ...

        def _publish(
            self,
            key: str,
            write: Callable[[int], object],
            if_absent: bool = False,
            if_version: ObjectVersion | None = None,
        ) -> None: ...

        def _publish_file(
            self,
            path: str,
            key: str,
            if_absent: bool = False,
            if_version: ObjectVersion | None = None,
        ) -> None: ...

    def _part_path(self, handle: PartsHandle, name: str) -> str:
        edge_key(handle.key, self)
        return os.path.join(self._keys.folder(handle.upload), name)

    def begin_parts(self, key: str, staging: str, *, any_order: bool = False) -> PartsHandle:
        """Create the staging folder of the shard at ``key``."""
        folder = f"{staging}/{edge_key(key, self).replace('/', '.')}"
        os.makedirs(self._keys.folder(folder), exist_ok=True)
        return PartsHandle(key, folder, staging, any_order)

    def _written(
        self, handle: PartsHandle, number: int, write: Callable[[int], int]
    ) -> PartReceipt:
        """Write part ``number`` with ``write(fd)``: placed, or to a file of its own."""
        if not handle.any_order:
            path = self._part_path(handle, f"part-{number:05d}")
            fd = self._keys.open(handle.upload, path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            try:
                return PartReceipt(number, write(fd))
            finally:
                os.close(fd)
        place = _process_name
        path = self._part_path(handle, place)
        with _lock(path):
            fd = self._keys.open(handle.upload, path, os.O_WRONLY | os.O_CREAT)
            try:
                offset = os.lseek(fd, 0, os.SEEK_END)
                size = write(fd)
                if self.fsync:  # the device works while the next parts are encoded
                    start_writeback(fd, offset, size)
            finally:
                os.close(fd)
        return PartReceipt(number, size, place=place, offset=offset)

    def write_part(
        self, handle: PartsHandle, number: int, buffers: Sequence[Buffer]
    ) -> PartReceipt:
        """Write part ``number`` (placed, or replacing an earlier try of it)."""
        return self._written(handle, number, lambda fd: write_all(fd, buffers))

    def copy_part(
        self, handle: PartsHandle, number: int, source: str, start: int, stop: int
    ) -> PartReceipt:
        """Fill part ``number`` with bytes ``[start, stop)`` of ``source`` (in the kernel)."""
        origin = self._path(source)
        src = self._keys.open(source, origin, os.O_RDONLY)
        try:

            def copy(fd: int) -> int:
                copy_into(fd, src, origin, start, stop)
                return stop - start

            return self._written(handle, number, copy)
        finally:
            os.close(src)

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
        """Publish head, parts (as :meth:`part_layout` lays them) and tail; remove the folder."""
        edge_key(handle.key, self)
        self._keys.folder(handle.upload)
        if receipts or head or tail:
            placed = self.part_layout(receipts).spans
            if placed[0][0] is None:  # by number: a file each
                spans = [
                    (f"part-{r.number:05d}", r.size, True) for r in sorted(receipts, key=_number)
                ]
            else:
                spans = [(str(name), size, False) for name, size in placed]
            if placed[0][0] == _process_name and not head:
                self._publish_placed(handle, spans, tail, if_absent, if_version)
            else:
                join = self._joining(handle, spans, head, tail)
                self._publish(handle.key, join, if_absent, if_version)
        self.abort_parts(handle)

    def part_layout(self, receipts: Sequence[PartReceipt]) -> PartLayout:
        """Where parts will lie: this process's placed file first (it becomes the object)."""
        return lay_out_parts(receipts, first=_process_name)

    def _append_parts(
        self, fd: int, handle: PartsHandle, spans: Sequence[_Span], writeback: Writeback
    ) -> None:
        """Append the first ``n`` bytes of each staging file ``(name, n, whole)`` to ``fd``.

        A file must hold exactly ``n`` bytes where ``whole``, at least ``n`` elsewhere.
        """
        for name, size, whole in spans:
            path = self._part_path(handle, name)
            part = self._keys.open(handle.upload, path, os.O_RDONLY)
            try:
                actual = os.fstat(part).st_size
                if actual < size or (whole and actual != size):
                    raise OSError(f"part file {path} has {actual} bytes, expected {size}")
                copy_into(fd, part, path, 0, size)
            finally:
                os.close(part)
            writeback.written(size)

    def _joining(
        self, handle: PartsHandle, spans: Sequence[_Span], head: bytes, tail: bytes
    ) -> Callable[[int], None]:
        """What writes head, the ``spans`` of the staging files and tail into a new file."""

        def join(fd: int) -> None:
            writeback = Writeback(fd, enabled=self.fsync)
            writeback.written(write_all(fd, [head]))
            self._append_parts(fd, handle, spans, writeback)
            write_all(fd, [tail])

        return join

    def _publish_placed(
        self,
        handle: PartsHandle,
        spans: Sequence[_Span],
        tail: bytes,
        if_absent: bool,
        if_version: ObjectVersion | None,
    ) -> None:
        """Make this process's placed file the object: cut it, append the others and the tail.

        The file is first renamed (under the lock its part writes take) to a
        name no part is written to, so that a late write of a part in this
        process starts a new file and never lands in the object; the other
        processes' files are only read. Safe to retry: a try that failed
        before publishing is taken up again from the renamed file, and one
        that failed after is recognised by the version it left at the key.

        Where the object's folder is on another file system than the staging
        folder (a mount inside the store), the file is copied there instead.
        """
        first, size, _ = spans[0]
        sealed = _sealed.pop(handle.upload, None)
        if sealed is not None and self.version(handle.key) == sealed:
            return  # an earlier try published it, then failed
        finishing = first.replace("placed-", "finishing-", 1)
        placed, path = self._part_path(handle, first), self._part_path(handle, finishing)
        with _lock(placed):
            if not os.path.exists(path):
                if sealed is not None:  # never a placed file a late write started
                    raise OSError(
                        f"{handle.key!r}: an earlier try of this finish published it, and it "
                        "changed since"
                    )
                os.rename(placed, path)
        fd = self._keys.open(handle.upload, path, os.O_WRONLY)
        try:
            found = os.fstat(fd).st_size
            if found < size:
                raise OSError(f"part file {path} has {found} bytes, expected {size}")
            os.ftruncate(fd, size)
            os.lseek(fd, size, os.SEEK_SET)
            self._append_parts(fd, handle, spans[1:], Writeback(fd, enabled=False))
            write_all(fd, [tail])
            self._seal(fd)
            _sealed[handle.upload] = version_of(os.fstat(fd))
        finally:
            os.close(fd)
        try:
            self._publish_file(path, handle.key, if_absent, if_version)
        except OSError as err:
            if err.errno != errno.EXDEV:
                raise
            del _sealed[handle.upload]  # what is published is a copy
            whole = self._joining(handle, [(finishing, os.stat(path).st_size, True)], b"", b"")
            self._publish(handle.key, whole, if_absent, if_version)

    def abort_parts(self, handle: PartsHandle) -> None:
        """Remove the staging folder of ``handle``."""
        edge_key(handle.key, self)
        _sealed.pop(handle.upload, None)
        shutil.rmtree(self._keys.folder(handle.upload), ignore_errors=True)

    def discard_staging(self, staging: str) -> None:
        """Remove the staging folder of a finished write, and its parent if empty."""
        folder = self._keys.folder(staging)
        shutil.rmtree(folder, ignore_errors=True)
        with contextlib.suppress(OSError):  # still in use by another write, or gone
            os.rmdir(os.path.dirname(folder))
