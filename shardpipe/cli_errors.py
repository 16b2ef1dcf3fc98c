"""How the command line reports a failure: one line on stderr and an exit status.

=====  ==============================================================
Code   Meaning
=====  ==============================================================
0      Done; ``verify``/``repair`` found no problem.
1      ``verify``/``repair`` found problems, or a write failed part way
       (complete shards are kept: rerun with ``--resume`` where offered).
2      Bad arguments, or something to read is missing or unreadable.
3      The storage cannot be reached or refuses access (credentials,
       endpoint, bucket, permissions, a read-only file system).
4      The storage failed during the work: out of space or quota, or
       still failing after every retry.
=====  ==============================================================
"""

from __future__ import annotations

import sys

from shardpipe.errors import (
    ArrayExistsError,
    InvalidArgumentError,
    JobConflictError,
    ShardpipeError,
    StorageAccessError,
    StorageError,
    StorageFullError,
    StoreNotWritableError,
    TransientStorageError,
)
from shardpipe.storage.retry import permanent_error

OK = 0
PROBLEMS = 1
BAD_INPUT = 2
NO_ACCESS = 3
STORAGE_FAILED = 4

EXPECTED: tuple[type[BaseException], ...] = (ShardpipeError, OSError, ValueError, KeyError)
"""Failures reported in one line; anything else is a bug and keeps its traceback."""


def exit_status(err: BaseException, *, during_work: bool = False) -> int:
    """The exit status for ``err``.

    Parameters
    ----------
    err : BaseException
        What went wrong.
    during_work : bool
        Whether it may have happened after writing began (a failure that is
        not about the arguments is then a write that failed part way).

    Returns
    -------
    int
        One of the statuses in the table of this module.
    """
    if isinstance(err, OSError) and not isinstance(err, StorageError):
        err = permanent_error(err, "") or err  # ENOSPC, EROFS... from zarr's own writes
    if isinstance(err, StorageAccessError | StoreNotWritableError):
        return NO_ACCESS
    if isinstance(err, StorageFullError | TransientStorageError):
        return STORAGE_FAILED
    if isinstance(err, InvalidArgumentError | ArrayExistsError | JobConflictError):
        return BAD_INPUT
    if during_work:
        return PROBLEMS
    if isinstance(err, StorageError) and not isinstance(err, FileNotFoundError):
        return STORAGE_FAILED
    return BAD_INPUT


def fail(command: str, err: BaseException, *, where: str = "", during_work: bool = False) -> int:
    """Print ``err`` as one line for ``shardpipe command``; return its exit status."""
    prefix = f"shardpipe {command}: " + (f"{where}: " if where else "")
    print(prefix + str(err).replace("\n", " "), file=sys.stderr)
    return exit_status(err, during_work=during_work)
