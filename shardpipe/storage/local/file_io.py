"""File primitives of the local backend: read, write all buffers, at an offset, copy, fsync.

Plain functions over file descriptors and ``os`` calls, so that
:mod:`shardpipe.storage.local.store` reads as what it does with them (and so
that tests inject the faults of a device, ``EIO``, where the kernel raises
them). Writes loop
until every byte is written (a regular file takes a ``writev`` whole, but a
short count is handled all the same), at most :data:`IOV_MAX` buffers a call.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Buffer, Iterable, Iterator, Sequence

IOV_MAX = 512
"""Most buffers handed to one ``writev`` / ``pwritev`` call."""

WRITE_BATCH = 256 << 10
"""Bytes of streamed buffers gathered for one ``writev`` (:func:`batched`)."""

_NO_COPY_RANGE = {errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP}


def _views(buffers: Sequence[Buffer]) -> list[memoryview]:
    """Flat byte views of the non-empty buffers."""
    return [v for v in (memoryview(b).cast("B") for b in buffers) if v.nbytes]


def batched(buffers: Iterable[Buffer], nbytes: int = WRITE_BATCH) -> Iterator[list[Buffer]]:
    """Group ``buffers``, in order, into lists of at least ``nbytes`` bytes (the last less).

    One ``writev`` per list instead of one ``write`` per buffer: an encoded
    chunk and its CRC32C, or small chunks, go to the kernel in one call. At
    most ``nbytes`` bytes plus one buffer are held back from the file.
    """
    batch: list[Buffer] = []
    size = 0
    for buffer in buffers:
        batch.append(buffer)
        size += memoryview(buffer).nbytes
        if size >= nbytes:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def _advance(views: list[memoryview], written: int) -> None:
    """Drop the ``written`` leading bytes from ``views`` (a buffer may be cut in two)."""
    while written and views:
        n = views[0].nbytes
        if written >= n:
            written -= n
            views.pop(0)
        else:
            views[0] = views[0][written:]
            written = 0


def read_all(fd: int) -> bytes:
    """The bytes of the file open at ``fd``, from its current offset to its end."""
    with open(fd, "rb", closefd=False) as f:
        return f.read()


def read_into(fd: int, out: memoryview) -> int:
    """Read ``fd`` from its offset into ``out`` until it is full or the file ends; the count."""
    done = 0
    while done < out.nbytes:
        n = os.readv(fd, [out[done:]])
        if n == 0:
            break
        done += n
    return done


def read_at(fd: int, start: int, stop: int) -> bytes:
    """Bytes ``[start, stop)`` of the file open at ``fd`` (fewer past its end: ``pread``)."""
    return os.pread(fd, stop - start, start)


def write_all(fd: int, buffers: Sequence[Buffer]) -> int:
    """Write every buffer to ``fd`` with as few system calls as possible."""
    views = _views(buffers)
    total = 0
    while views:
        written = os.writev(fd, views[:IOV_MAX])
        total += written
        _advance(views, written)
    return total


def pwrite_all(fd: int, buffers: Sequence[Buffer], offset: int) -> int:
    """Write every buffer to ``fd`` from byte ``offset`` on (``pwritev``)."""
    views = _views(buffers)
    total = 0
    while views:
        written = os.pwritev(fd, views[:IOV_MAX], offset + total)
        total += written
        _advance(views, written)
    return total


def fsync_dir(path: str) -> None:
    """``fsync`` a directory: what makes a rename or a new entry in it durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def copy_into(dst_fd: int, src_fd: int, name: str, start: int = 0, stop: int | None = None) -> None:
    """Append bytes ``[start, stop)`` of the file open at ``src_fd`` (``name``) to ``dst_fd``.

    In the kernel (``copy_file_range``) where it can; ``src_fd`` is left open.
    """
    size = os.fstat(src_fd).st_size
    stop = size if stop is None else stop
    if not 0 <= start <= stop <= size:
        raise ValueError(f"byte range [{start}, {stop}) lies outside {name} ({size} bytes)")
    offset, remaining = start, stop - start
    while remaining:
        try:
            n = os.copy_file_range(src_fd, dst_fd, remaining, offset_src=offset)
        except OSError as err:
            if err.errno not in _NO_COPY_RANGE:
                raise
            n = os.write(dst_fd, os.pread(src_fd, min(remaining, 16 << 20), offset))
        if n == 0:
            raise OSError(f"copying {name} made no progress")
        offset += n
        remaining -= n
