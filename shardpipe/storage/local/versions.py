"""Versions of local files, ``"<inode>:<size>:<mtime_ns>"``, and the stamps that keep them apart.

Every write of the local backend stamps the file's modification time itself
from the nanosecond clock (:func:`stamp`; an in-place write always moves it
forward): the kernel's own stamps may come from a clock that ticks only
every few milliseconds, and file systems reuse the inode numbers of replaced
files at once, so two writes of the same size within one tick could
otherwise leave the same version.
"""

from __future__ import annotations

import os
import threading
import time

from shardpipe.storage.base import ObjectVersion


def version_of(st: os.stat_result) -> ObjectVersion:
    """The version of the file ``st`` describes: ``"<inode>:<size>:<mtime_ns>"``."""
    return f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"


_stamp_lock = threading.Lock()
_last_stamp = 0


def _unlocked_after_fork() -> None:
    global _stamp_lock
    _stamp_lock = threading.Lock()  # a thread of the parent may have held it


os.register_at_fork(after_in_child=_unlocked_after_fork)


def stamp(fd: int, after_ns: int = 0) -> None:
    """Set the modification time of ``fd`` to now (nanoseconds), later than ``after_ns``.

    Within this process the stamps also strictly increase, so no two writes
    here leave the same time.
    """
    global _last_stamp
    with _stamp_lock:
        now = max(time.time_ns(), after_ns + 1, _last_stamp + 1)
        _last_stamp = now
    os.utime(fd, ns=(now, now))
