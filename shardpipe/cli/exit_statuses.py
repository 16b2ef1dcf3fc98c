"""How the command line ends: the exit statuses, and which errors end in which.

:data:`EXIT_STATUSES` is the one table of exit statuses: what each means
and which errors end in it. :func:`exit_status` follows it, the help of
``shardpipe`` and of every command ends with it (:func:`statuses_text`),
and the CLI reference of the docs shows :func:`statuses_markdown` (tests compare them,
and check that every public error class of :mod:`shardpipe.errors` ends
in a status whose row names it or covers it). :mod:`shardpipe.cli.failures`
prints a command's error and ends it in its status.
"""

from __future__ import annotations

from dataclasses import dataclass

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
    UnsafeKeyError,
)
from shardpipe.storage.errnos import permanent_error

OK = 0
PROBLEMS = 1
BAD_INPUT = 2
NO_ACCESS = 3
STORAGE_FAILED = 4
INTERRUPTED = 130  # 128 + SIGINT, as shells report a command Ctrl-C stopped

EXPECTED: tuple[type[BaseException], ...] = (ShardpipeError, OSError, ValueError, KeyError)
"""Failures reported in one line; anything else is a bug and keeps its traceback."""


@dataclass(frozen=True)
class ExitStatus:
    """One exit status of the command line.

    Attributes
    ----------
    code : int
        The status.
    meaning : str
        What it means, in words.
    errors : tuple of exception classes
        Errors that always end in this status (with their subclasses).
    before_work : tuple of exception classes
        Errors that end in this status when they happen before writing began.
    otherwise : str
        ``"before"`` or ``"after"``: this status is also that of any other
        error raised before (after) writing began; ``""`` if not.
    """

    code: int
    meaning: str
    errors: tuple[type[BaseException], ...] = ()
    before_work: tuple[type[BaseException], ...] = ()
    otherwise: str = ""

    def causes(self) -> str:
        """The errors that end here, in words (empty for success)."""
        parts = [", ".join(f"`{e.__name__}`" for e in self.errors)] if self.errors else []
        if self.before_work:
            names = ", ".join(f"`{e.__name__}`" for e in self.before_work)
            parts.append(f"{names} before writing began")
        if self.otherwise:
            parts.append(f"any other error {self.otherwise} writing began")
        return "; ".join(parts)


EXIT_STATUSES: tuple[ExitStatus, ...] = (
    ExitStatus(OK, "done; `verify`/`repair` found no problem"),
    ExitStatus(
        PROBLEMS,
        "`verify`/`repair` found problems, or a write failed part way (complete shards are "
        "kept: rerun with `--resume` where offered)",
        otherwise="after",
    ),
    ExitStatus(
        BAD_INPUT,
        "the command could not run: bad arguments, something in the way of the target, "
        "something to read missing or unreadable, a stored key that would lead outside the "
        "store, or another job holds the array or took it over (wait for it; if it no longer "
        "runs, `shardpipe repair`)",
        errors=(InvalidArgumentError, ArrayExistsError, JobConflictError, UnsafeKeyError),
        otherwise="before",
    ),
    ExitStatus(
        NO_ACCESS,
        "the storage cannot be reached or refuses access (credentials, endpoint, bucket, "
        "permissions, read-only)",
        errors=(StorageAccessError, StoreNotWritableError),
    ),
    ExitStatus(
        STORAGE_FAILED,
        "the storage failed during the work (out of space or quota, or still failing after "
        "every retry)",
        errors=(StorageFullError, TransientStorageError),
        before_work=(StorageError,),
    ),
    ExitStatus(
        INTERRUPTED,
        "interrupted (Ctrl-C); a write keeps its complete shards: rerun with `--resume` "
        "where offered",
        errors=(KeyboardInterrupt,),
    ),
)
"""The exit statuses, in order."""


def exit_status(err: BaseException, *, during_work: bool = False) -> int:
    """The exit status for ``err`` (see :data:`EXIT_STATUSES`).

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
        One of the statuses of :data:`EXIT_STATUSES`.
    """
    if isinstance(err, OSError) and not isinstance(err, StorageError):
        err = permanent_error(err, "") or err  # ENOSPC, EROFS... from zarr's own writes
    for status in EXIT_STATUSES:
        if status.errors and isinstance(err, status.errors):
            return status.code
    phase = "after" if during_work else "before"
    for status in EXIT_STATUSES:
        if (
            not during_work
            and status.before_work
            and isinstance(err, status.before_work)
            and not isinstance(err, FileNotFoundError)
        ):
            return status.code
    return next(s.code for s in EXIT_STATUSES if s.otherwise == phase)


def statuses_text() -> str:
    """The table as every help of the command line ends: a heading, then a row per status."""
    rows = [
        f"  {s.code}  {s.meaning}" + (f" [{s.causes()}]." if s.causes() else ".")
        for s in EXIT_STATUSES
    ]
    return "\n".join(["Exit statuses:", *rows]).replace("`", "")


def statuses_markdown() -> str:
    """The table as the CLI reference of the docs (``docs/cli.md``) shows it."""
    rows = ["| status | meaning | errors |", "|---:|---|---|"]
    rows += [f"| {s.code} | {s.meaning} | {s.causes()} |" for s in EXIT_STATUSES]
    return "\n".join(rows)
