"""Local file-system backend: atomic, durable shard files without locks.

* ``put`` writes a temporary file beside the target, ``fsync``s it, renames
  it over the target with ``os.replace`` and ``fsync``s the directory, so a
  reader sees the old object or the new one, never a mix, even after a
  crash or power loss (``fsync=False`` keeps the atomicity and drops the
  durability).
* ``put_streamed`` does the same with buffers produced one by one (a shard
  whose chunks are still being encoded): each is written as it comes and,
  with ``fsync``, its writeback is started at once
  (:mod:`shardpipe.storage.local.writeback`), so the final ``fsync`` waits only for
  the last stretch. The call returns once the object is durable at its key;
  a ``kill -9`` before leaves the old object (or nothing) there and at most a
  partial temporary file beside it, and a power loss leaves the object
  absent or complete (its bytes are durable before the rename).
* Parts go to a staging folder, where each process appends those it writes
  in any order to a file of its own, which becomes the object (or each is a
  file of its own, joined in the kernel), published like ``put``
  (:mod:`shardpipe.storage.local.parts`).
* Conditional publishes: create-only links the temporary file to the key
  (``os.link`` fails if the key exists: no window for a second writer);
  replace-if-unchanged compares the key's version (inode, size, mtime) just
  before the rename. A file system has no compare-and-swap, so a writer that
  replaces the file between that check and the rename is not detected.
* ``write_at`` and ``append`` change a file in place (``pwritev``, ``O_APPEND``)
  and fsync it: not atomic, the caller keeps what it needs to undo them.

Keys stay inside the root (:mod:`shardpipe.storage.local.keys`): every key
and prefix is checked before any file is touched, a folder may be a link
only if it resolves inside the root, and a file at a key that is itself a
symbolic link is refused by name (:class:`~shardpipe.errors.UnsafeKeyError`),
wherever it points.
Temporary files are named after the process writing them
(:mod:`shardpipe.storage.local.temporary`), so that ``cleanup`` removes only
those whose writer no longer runs: a live job's temporary files (of its
marker, its records, its shards) are never removed under it.

Versions are ``"<inode>:<size>:<mtime_ns>"``. Every write here stamps the
file's modification time itself from the nanosecond clock (an in-place write
always moves it forward): the kernel's own stamps may come from a clock that ticks
only every few milliseconds, and file systems reuse the inode numbers of
replaced files at once, so two writes of the same size within one tick could
otherwise leave the same version (an old version would look current again).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Buffer, Callable, Iterable, Iterator, Sequence

from shardpipe.errors import ConditionFailedError
from shardpipe.storage.base import (
    ObjectVersion,
    ShardStore,
    StoreAbilities,
)
from shardpipe.storage.buffers import check_object_size
from shardpipe.storage.keys import TEMPORARY_SUFFIX, edge_key
from shardpipe.storage.local.file_io import (
    batched,
    fsync_dir,
    pwrite_all,
    read_all,
    read_at,
    read_into,
    write_all,
)
from shardpipe.storage.local.keys import LocalKeys
from shardpipe.storage.local.listing import sorted_keys
from shardpipe.storage.local.parts import LocalParts
from shardpipe.storage.local.temporary import is_zarr_temporary, temporary_name, writer_may_run
from shardpipe.storage.local.versions import stamp, version_of
from shardpipe.storage.local.writeback import Writeback


class LocalShardStore(LocalParts, ShardStore):
    """Shards as files under a root directory.

    Parameters
    ----------
    root : str or Path
        Directory that keys are relative to.
    fsync : bool
        Make every published shard durable (``fsync`` of the file and its
        directory). Default True.
    """

    abilities = StoreAbilities(
        parts=True,
        copy_range=True,
        create_only=True,
        write_at=True,
        append=True,
        streams=True,
        hard_links=True,
        leaves_temporaries=True,
    )

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = True) -> None:
        self.root = os.path.abspath(os.fspath(root))
        self.fsync = fsync
        self._keys = LocalKeys(self.root, self)

    def __repr__(self) -> str:
        return f"LocalShardStore({self.root!r}, fsync={self.fsync})"

    def __getstate__(self) -> dict[str, object]:
        return {"root": self.root, "fsync": self.fsync}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._keys = LocalKeys(self.root, self)

    def _path(self, key: str) -> str:
        return self._keys.path(key)

    # -- whole objects -------------------------------------------------------
    def _temporary(self, key: str) -> tuple[str, str, str]:
        """The file of ``key``, its folder (made if missing), a fresh temporary name in it."""
        final = self._path(key)
        folder = os.path.dirname(final)
        os.makedirs(folder, exist_ok=True)
        tmp = os.path.join(folder, temporary_name(os.path.basename(final)))
        return final, folder, tmp

    def _publish(
        self,
        key: str,
        write: Callable[[int], object],
        if_absent: bool = False,
        if_version: ObjectVersion | None = None,
    ) -> None:
        """Write a temporary file with ``write(fd)``, then move it onto ``key``.

        The conditions are those of :meth:`_publish_file`.
        """
        if if_absent and if_version is not None:
            raise ValueError("if_absent and if_version exclude each other")
        _, _, tmp = self._temporary(key)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            try:
                write(fd)
                self._seal(fd)
            finally:
                os.close(fd)
            self._publish_file(tmp, key, if_absent, if_version)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

    def _seal(self, fd: int) -> None:
        """Stamp the version of a file about to be published; ``fsync`` it (with ``fsync``)."""
        stamp(fd)
        if self.fsync:
            os.fsync(fd)

    def _publish_file(
        self,
        path: str,
        key: str,
        if_absent: bool = False,
        if_version: ObjectVersion | None = None,
    ) -> None:
        """Move the sealed file at ``path`` (on the store's file system) onto ``key``.

        With ``if_absent`` the file is linked to ``key`` (which fails if the key
        exists); with ``if_version`` the key's version is checked first. A
        failed condition leaves the file at ``path``.
        """
        if if_absent and if_version is not None:
            raise ValueError("if_absent and if_version exclude each other")
        final, folder, _ = self._temporary(key)
        if if_absent:
            try:
                os.link(path, final)  # atomic: fails if anything is at the key
            except FileExistsError:
                raise ConditionFailedError(
                    f"{key!r} ({final}): expected no object (create-only write), found "
                    f"version {self.version(key)}; nothing was written"
                ) from None
            os.unlink(path)
        else:
            # no compare-and-swap on a file system: a replacement between this
            # check and the rename goes unnoticed (replace_if_unchanged=False)
            found = None if if_version is None else self.version(key)
            if found != if_version:
                raise ConditionFailedError(
                    f"{key!r} ({final}): expected version {if_version}, found "
                    f"{'no object' if found is None else f'version {found}'}; "
                    "nothing was written"
                )
            os.replace(path, final)
        if self.fsync:
            fsync_dir(folder)

    def put(
        self,
        key: str,
        buffers: Sequence[Buffer],
        *,
        if_absent: bool = False,
        if_version: ObjectVersion | None = None,
    ) -> None:
        """Publish the concatenation of ``buffers`` at ``key`` atomically."""
        self._publish(key, lambda fd: write_all(fd, buffers), if_absent, if_version)

    def put_streamed(self, key: str, buffers: Iterable[Buffer]) -> int:
        """Publish ``buffers`` at ``key`` atomically, writing them as they are produced.

        Buffers go to the file in batches of about 256 KiB, one ``writev`` each
        (:func:`~shardpipe.storage.local.file_io.batched`).

        With ``fsync``, the kernel starts writing each stretch of the
        temporary file to the device as soon as it is written
        (:class:`~shardpipe.storage.local.writeback.Writeback`), so the device works
        while the caller produces the next buffers and the final ``fsync``
        waits only for the last stretch. Crash safety is that of :meth:`put`.
        """
        total = 0

        def write(fd: int) -> None:
            nonlocal total
            writeback = Writeback(fd, enabled=self.fsync)
            for batch in batched(buffers):
                n = write_all(fd, batch)
                writeback.written(n)
                total += n

        self._publish(key, write)
        return total

    def make_durable(self, keys: Sequence[str]) -> None:
        """``fsync`` the files at ``keys`` (those present) and their folders (with ``fsync``)."""
        for key in keys:
            edge_key(key, self)
        if not self.fsync:
            return
        folders = set()
        for key in keys:
            path = self._path(key)
            try:
                fd = self._keys.open(key, path, os.O_RDONLY)
            except FileNotFoundError:
                continue
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            folders.add(os.path.dirname(path))
        for folder in sorted(folders):
            fsync_dir(folder)

    def get(self, key: str) -> bytes | None:
        """Return the bytes at ``key``, or ``None`` when absent."""
        try:
            fd = self._keys.open(key, self._path(key), os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            return read_all(fd)
        finally:
            os.close(fd)

    def get_into(self, key: str, out: Buffer) -> bool:
        """Read the file at ``key`` straight into ``out`` (its size); False when absent."""
        view = memoryview(out).cast("B")
        try:
            fd = self._keys.open(key, self._path(key), os.O_RDONLY)
        except FileNotFoundError:
            return False
        try:
            check_object_size(key, os.fstat(fd).st_size, view.nbytes)
            check_object_size(key, read_into(fd, view), view.nbytes)  # shortened meanwhile
        finally:
            os.close(fd)
        return True

    def get_range(self, key: str, start: int, stop: int) -> bytes:
        """Return ``[start, stop)`` of the object at ``key``."""
        fd = self._keys.open(key, self._path(key), os.O_RDONLY)
        try:
            return read_at(fd, start, stop)
        finally:
            os.close(fd)

    def size(self, key: str) -> int | None:
        """Return the size of the object at ``key``, or ``None`` when absent."""
        try:
            return self._keys.lstat(key, self._path(key)).st_size
        except FileNotFoundError:
            return None

    def version(self, key: str) -> ObjectVersion | None:
        """Return ``"<inode>:<size>:<mtime_ns>"`` of the file at ``key``, or None when absent."""
        try:
            return version_of(self._keys.lstat(key, self._path(key)))
        except FileNotFoundError:
            return None

    def _change(self, key: str, flags: int, change: Callable[[int, int], object]) -> int:
        """Open the existing file at ``key``, ``change(fd, size)``, fsync; return its new size.

        The file gets a new modification time (and so a new version) even if
        its size stays the same.
        """
        fd = self._keys.open(key, self._path(key), os.O_WRONLY | flags)
        try:
            before = os.fstat(fd)
            change(fd, before.st_size)
            stamp(fd, after_ns=before.st_mtime_ns)
            if self.fsync:
                os.fsync(fd)
            return os.fstat(fd).st_size
        finally:
            os.close(fd)

    def write_at(self, key: str, offset: int, buffers: Sequence[Buffer]) -> None:
        """Overwrite the file at ``key`` from byte ``offset`` (``pwritev``; not atomic).

        Raises
        ------
        FileNotFoundError
            If nothing is at ``key``.
        ValueError
            If ``offset`` is negative or lies past the end of the file.
        """

        def change(fd: int, size: int) -> None:
            if not 0 <= offset <= size:
                raise ValueError(f"offset {offset} lies outside {key!r} ({size} bytes)")
            pwrite_all(fd, buffers, offset)

        self._change(key, 0, change)

    def write_ranges(self, key: str, ranges: Sequence[tuple[int, Sequence[Buffer]]]) -> None:
        """Write every ``(offset, buffers)`` in order, then ``fsync`` once.

        Raises
        ------
        FileNotFoundError
            If nothing is at ``key``.
        ValueError
            If an offset lies outside the file as it is when that range is written.
        """

        def change(fd: int, size: int) -> None:
            for offset, buffers in ranges:
                if not 0 <= offset <= size:
                    raise ValueError(f"offset {offset} lies outside {key!r} ({size} bytes)")
                size = max(size, offset + pwrite_all(fd, buffers, offset))

        self._change(key, 0, change)

    def truncate(self, key: str, size: int) -> None:
        """Cut the file at ``key`` down to ``size`` bytes (never grows it)."""

        def change(fd: int, current: int) -> None:
            if size < current:
                os.ftruncate(fd, size)

        self._change(key, 0, change)

    def append(self, key: str, buffers: Sequence[Buffer]) -> int:
        """Append to the file at ``key`` (``O_APPEND``; not atomic); return its new size.

        Raises
        ------
        FileNotFoundError
            If nothing is at ``key``.
        """
        return self._change(key, os.O_APPEND, lambda fd, _: write_all(fd, buffers))

    def delete(self, key: str) -> None:
        """Remove ``key`` if present."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._path(key))

    def list(self, prefix: str) -> Iterator[str]:
        """Iterate over the keys that start with ``prefix`` (a plain string prefix), in order.

        ``"arr/c/1"`` lists ``arr/c/1``, ``arr/c/10`` and everything under the
        folders ``arr/c/1/`` and ``arr/c/10/``, as on an object store, and in
        the same order: sorted as strings. Folders are read one at a time as
        the listing reaches them (each one's names are held while it is).
        """
        edge_key(prefix, self, prefix=True)
        folder, _, start = prefix.rpartition("/")
        yield from sorted_keys(self._keys.folder(folder), folder, start)

    def link(self, source: str, key: str) -> None:
        """Give ``key`` the bytes of ``source``: a hard link, or a copy where that is unsafe.

        A hard link shares the file: a file that already has other links (a
        ``cp -al`` copy, a backup) or a file system without hard links gets
        a copy instead, so that a later in-place write to ``key`` changes
        nothing else. Atomic either way (a temporary name, then a rename).
        """
        origin = self._path(source)
        try:
            found = self._keys.lstat(source, origin)
        except FileNotFoundError:
            raise FileNotFoundError(f"no file {origin} to link {key!r} to") from None
        final, folder, tmp = self._temporary(key)
        try:
            if found.st_nlink > 1 or (
                os.path.lexists(final) and os.path.samestat(found, os.lstat(final))
            ):
                raise OSError("shared")  # copy: never add a link to a shared file
            os.link(origin, tmp, follow_symlinks=False)
        except OSError:
            shutil.copyfile(origin, tmp, follow_symlinks=False)
        try:
            os.replace(tmp, final)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)  # left when tmp and final were links of one file
        if self.fsync:
            fsync_dir(folder)

    def prune(self, prefix: str) -> None:
        """Remove the empty folders under the folder ``prefix`` names, and it when empty."""
        top = self._keys.folder(prefix)
        if not os.path.isdir(top):
            return
        for folder, _, _ in sorted(os.walk(top), key=lambda entry: -len(entry[0])):
            with contextlib.suppress(OSError):  # not empty
                os.rmdir(folder)

    def cleanup(self, staging: str, shard_prefix: str) -> int:
        """Remove the staging folder and temporary files a failed write left.

        Temporary files lie beside the shards they were to become, so they are
        looked for in the whole folder that holds ``shard_prefix`` (the
        array's folder): shard keys may be ``c/0/1``, ``c.0.1`` or ``0.1``.
        Those whose writer may still run are left alone
        (:func:`~shardpipe.storage.local.temporary.writer_may_run`): the marker another job is
        creating, say. zarr's temporary file of the array's ``zarr.json``
        (:data:`~shardpipe.storage.local.temporary.ZARR_TEMPORARY`) goes too:
        the caller holds the array, so no other write of its metadata runs.
        """
        edge_key(shard_prefix, self, prefix=True)
        folder = self._keys.folder(staging)
        removed = sum(len(files) for _, _, files in os.walk(folder))
        self.discard_staging(staging)
        array_folder = shard_prefix.rstrip("/").rpartition("/")[0]
        for key in self.list(f"{array_folder}/" if array_folder else ""):
            ours = key.endswith(TEMPORARY_SUFFIX) and not writer_may_run(self._path(key))
            if ours or is_zarr_temporary(key, array_folder):
                self.delete(key)
                removed += 1
        return removed
