"""Which file-system faults are transient and which permanent, and the errors that say so.

The sorting :class:`~shardpipe.storage.retry.RetryingStore` applies to every
failure of a backend, and that zarr's own reads and writes of local files
get too (:mod:`shardpipe.storage.zarr_errors`,
:mod:`shardpipe.storage.local.contained`, :mod:`shardpipe.stored.bounded_reads`):

* **transient** (:class:`~shardpipe.errors.TransientStorageError`;
  ``EINTR``, ``EAGAIN``, ``ETIMEDOUT``, ``ECONNRESET``, ``ECONNABORTED``):
  worth trying again (:func:`is_transient`);
* **permanent** (``ENOSPC``/``EDQUOT``: :class:`~shardpipe.errors.StorageFullError`;
  ``EROFS``/``EACCES``/``EPERM``: :class:`~shardpipe.errors.StorageAccessError`;
  ``EIO``: :class:`~shardpipe.errors.StorageError`, its ``errno`` kept):
  the error with the fix in plain words (:func:`permanent_error`; within
  :func:`explained`, a block's permanent faults are raised as those errors).
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from contextlib import contextmanager

from shardpipe import advice
from shardpipe.errors import (
    StorageAccessError,
    StorageError,
    StorageFullError,
    TransientStorageError,
)

TRANSIENT_ERRNOS = frozenset(
    {errno.EINTR, errno.EAGAIN, errno.ETIMEDOUT, errno.ECONNRESET, errno.ECONNABORTED}
)
"""File-system error numbers worth trying again."""

FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
"""Error numbers meaning the storage has no room left."""

ACCESS_ERRNOS = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})
"""Error numbers meaning the storage refuses the write."""

# EIO is permanent, not transient: the kernel reports it once its own retries of the
# device failed (a bad sector, a dead disk or controller, a network file system that
# gave up), which backing off for seconds does not heal; and after a failed
# write-back the kernel may have dropped the dirty pages, so a second fsync can
# succeed on data that was never written. Failing at once says so while the write
# can still be resumed once the device is fixed.
DEVICE_ERRNOS = frozenset({errno.EIO})
"""Error numbers meaning the device failed to read or write (not retried)."""


def permanent_error(err: OSError, what: str, *, in_place: bool = False) -> StorageError | None:
    """The shardpipe error for a permanent file-system fault ``err`` while doing ``what``.

    None when ``err`` is not one (it may be transient, or not a storage fault).
    ``in_place`` says that ``what`` changed an existing object in place (a
    positioned write, an append): its caller says, in a note, what became of
    the object.
    """
    if isinstance(err, StorageError) or err.errno is None:
        return None
    if err.errno in FULL_ERRNOS:
        happened = "Nothing was published under that key"
        if in_place:
            happened = "The object was being changed in place (see the notes for what became of it)"
        return StorageFullError(
            f"{what}: {err.strerror} (errno {errno.errorcode[err.errno]}). {happened}; "
            "shards published before stay, so the array is partial. Free space (or raise "
            f"the quota), then run the same write with {advice.setting('resume')} to "
            "write only what is "
            "missing"
        )
    if err.errno in ACCESS_ERRNOS:
        return StorageAccessError(
            f"{what}: {err.strerror} (errno {errno.errorcode[err.errno]}). Check the "
            "permissions of the target and that its file system is mounted read-write"
        )
    if err.errno in DEVICE_ERRNOS:
        happened = "no object is left half-written: writes publish whole objects"
        if in_place:
            happened = "the object was being changed in place (see the notes for what became of it)"
        device = StorageError(
            f"{what}: {err.strerror} (errno {errno.errorcode[err.errno]}): the device failed "
            "(a failing disk, a bad sector, a lost network file system) and the kernel gave "
            f"up; {happened}. Not retried: check the device (the kernel log names it), then "
            f"run the same job again (a write with {advice.setting('resume')})"
        )
        device.errno = err.errno  # still an EIO to code that looks at the number
        return device
    return None


@contextmanager
def explained(what: str) -> Iterator[None]:
    """Within: a permanent ``OSError`` is raised as shardpipe's error saying ``what`` failed
    (:func:`permanent_error`); any other error as it is."""
    try:
        yield
    except OSError as err:
        plain = permanent_error(err, what)
        if plain is None:
            raise
        raise plain from err


def is_transient(err: BaseException) -> bool:
    """Whether ``err`` is a storage fault that may go away when tried again."""
    if isinstance(err, TransientStorageError):
        return True
    if isinstance(err, StorageError):
        return False
    return isinstance(err, OSError) and err.errno in TRANSIENT_ERRNOS
