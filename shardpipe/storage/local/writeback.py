"""Start the kernel's writeback of a file's dirty bytes early, without waiting for it.

A durable publish ends with ``fsync``, which waits until every byte of the
file is on the device. Written in one go just before that call, a shard's
whole body is still in the page cache and the task waits for all of it: its
core stands idle for as long as the disk needs. :class:`Writeback` asks the
kernel to start writing each stretch of the file as soon as it has been
written (Linux ``sync_file_range(SYNC_FILE_RANGE_WRITE)``, which queues the
I/O and returns), so the device works while the task encodes the next inner
chunks, and the final ``fsync`` waits only for the last stretch and the
file system's journal commit.

This changes when bytes reach the device, never what a reader or a crash
can see: the file is still a temporary one until it is renamed, and the
rename still follows the ``fsync``. Where ``sync_file_range`` is missing (not
Linux) nothing is started early and ``fsync`` does all the work, as before.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from collections.abc import Callable

SYNC_FILE_RANGE_WRITE = 2
"""Start writeback of the dirty pages of the range; do not wait for it (``<fcntl.h>``)."""

WRITEBACK_STEP = 1 << 20
"""Bytes written between two requests: large enough to make each request worth a call."""


def _load_sync_file_range() -> Callable[[int, int, int, int], int] | None:
    """``sync_file_range`` from the C library, or None where there is none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        func = libc.sync_file_range
    except (OSError, AttributeError):
        return None
    func.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
    func.restype = ctypes.c_int
    return func


_sync_file_range = _load_sync_file_range()


def start_writeback(fd: int, offset: int, nbytes: int) -> bool:
    """Ask the kernel to start writing bytes ``[offset, offset + nbytes)`` of ``fd`` to the device.

    Returns whether the request was made. A refusal (an unsupported file
    system) is not an error: the final ``fsync`` writes the bytes anyway and
    reports any failure to write them.
    """
    if _sync_file_range is None or nbytes <= 0:
        return False
    return _sync_file_range(fd, offset, nbytes, SYNC_FILE_RANGE_WRITE) == 0


class Writeback:
    """Keeps the device busy with a file while more of it is being written.

    Call :meth:`written` after each write; every :data:`WRITEBACK_STEP`
    bytes the stretch written since the last request is handed to the
    kernel. Disabled (``enabled=False``) when ``fsync`` will not be called:
    starting writeback early would then only make the disk busier.

    Parameters
    ----------
    fd : int
        The file being written, from byte 0 on.
    enabled : bool
        Whether to start writeback at all.
    """

    def __init__(self, fd: int, *, enabled: bool) -> None:
        self.fd = fd
        self.enabled = enabled and _sync_file_range is not None
        self.end = 0
        self.started = 0

    def written(self, nbytes: int) -> None:
        """Record ``nbytes`` more bytes written after the previous ones."""
        self.end += nbytes
        if self.enabled and self.end - self.started >= WRITEBACK_STEP:
            if not start_writeback(self.fd, self.started, self.end - self.started):
                self.enabled = False  # not supported here: leave it all to fsync
            self.started = self.end
