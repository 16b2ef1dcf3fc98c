"""shardpipe's exceptions, all under ``ShardpipeError``.

Every error shardpipe raises on purpose is defined here, so that a caller can
catch ``ShardpipeError`` alone. Where a built-in exception type also fits
(``ValueError`` for bad values, ``OSError`` for storage faults) the class
derives from it too, so code written against the built-in keeps working.
"""

from __future__ import annotations

from shardpipe import advice


class ShardpipeError(Exception):
    """Base class of every error shardpipe raises on purpose."""


class InvalidArgumentError(ShardpipeError, ValueError):
    """An argument is wrong; the message names it, its value and the fix.

    Parameters
    ----------
    parameter : str
        Name of the offending parameter (``"shards"``, ``"store"``, ...).
    problem : str
        What is wrong, with the value.
    fix : str
        How to fix it.
    """

    def __init__(self, parameter: str, problem: str, fix: str) -> None:
        self.parameter = parameter
        self.problem = problem
        self.fix = fix
        super().__init__(f"{advice.name(parameter)}: {problem}. {fix}")

    def __reduce__(self) -> tuple[type[InvalidArgumentError], tuple[str, str, str]]:
        return type(self), (self.parameter, self.problem, self.fix)


class UnsupportedLegacyError(InvalidArgumentError):
    """An array of the sharding storage-transformer draft uses what Zarr v3 cannot express.

    Parameters
    ----------
    path : str
        The array's path in its hierarchy (``""``: the root).
    what : str
        The feature, with its value.
    fix : str
        What to do instead.
    """

    def __init__(self, path: str, what: str, fix: str) -> None:
        super().__init__("source", f"array {path or '/'!r}: {what}", fix)
        self.path = path
        self.what = what

    def __reduce__(self) -> tuple[type[InvalidArgumentError], tuple[str, str, str]]:
        return type(self), (self.path, self.what, self.fix)


class ArrayExistsError(ShardpipeError, FileExistsError):
    """Something already exists where the array would go and overwrite is off."""


class StoreNotWritableError(ShardpipeError, PermissionError):
    """The target store cannot be written to."""


class SourceOverlapsTargetError(InvalidArgumentError):
    """The array to write is read from the place it would be written to."""


class PlanError(ShardpipeError, ValueError):
    """A write cannot be planned within the given limits."""


def _typed(nbytes: int) -> str:
    """A budget as the caller would pass it: ``30,000`` from Python, ``30000`` on the
    command line (where ``--max-mem`` does not take thousands separators)."""
    return str(nbytes) if advice.for_command_line() else f"{nbytes:,}"


class MemoryBudgetError(InvalidArgumentError, PlanError):
    """A task of the plan would need more memory than ``max_mem``.

    Parameters
    ----------
    task : str
        The task that does not fit (its kind, and which shard and part).
    projected : int
        Bytes the memory model projects for it.
    budget : int
        The budget, ``max_mem``, in bytes.
    fix : str
        How to make it fit.
    """

    def __init__(self, task: str, projected: int, budget: int, fix: str) -> None:
        self.task = task
        self.projected = projected
        self.budget = budget
        super().__init__(
            "max_mem",
            f"a {task} task would hold about {projected:,} bytes, "
            f"{projected - budget:,} more than {advice.valued('max_mem', _typed(budget))}",
            fix[:1].upper() + fix[1:],
        )

    def __reduce__(self) -> tuple[type[MemoryBudgetError], tuple[str, int, int, str]]:  # type: ignore[override]
        return type(self), (self.task, self.projected, self.budget, self.fix)


class ShardFormatError(ShardpipeError, ValueError):
    """A shard's bytes do not follow its format."""


class ChunkDecodeError(ShardFormatError):
    """The stored bytes of one inner chunk are not a valid encoding of it.

    The message says what is wrong in words: a CRC32C mismatch, a zstd frame
    that declares the wrong content size, or the codec's own error.
    """


class MetadataError(ShardpipeError, ValueError):
    """A metadata document (``zarr.json``, a shardpipe record) is missing parts or unreadable.

    The message names the key of the document and what is wrong with it.
    """


class UnsafeKeyError(ShardpipeError, ValueError):
    """A key would lead outside the store (``..``, an absolute path, a NUL, a link out).

    Keys that come from stored bytes (metadata documents, listings, markers,
    records, a precomputed ``info``) are checked before any read, write, link
    or delete; one that could reach outside the store is refused with this
    error, which names the key and where it came from.

    Parameters
    ----------
    key : str
        The refused key.
    origin : str
        Where the key came from (a document's key, ``"a listing"``...).
    why : str
        What makes it unsafe.
    """

    def __init__(self, key: str, origin: str, why: str) -> None:
        self.key = key
        self.origin = origin
        self.why = why
        where = f" (from {origin})" if origin else ""
        super().__init__(
            f"refused the key {key!r}{where}: {why}; keys must stay inside the store. "
            "The stored data may have been tampered with: inspect it before writing again"
        )

    def __reduce__(self) -> tuple[type[UnsafeKeyError], tuple[str, str, str]]:
        return type(self), (self.key, self.origin, self.why)


class StorageError(ShardpipeError, OSError):
    """A storage operation failed (after retries, when the fault was transient)."""


class TransientStorageError(StorageError):
    """A storage fault that may go away when tried again (HTTP 5xx, throttling, timeouts,
    connection resets, ``EINTR``/``EAGAIN``); shardpipe retries these with backoff."""


class StorageAccessError(StorageError):
    """The storage cannot be reached or refuses access: missing credentials, a wrong
    endpoint, no such bucket, access denied, a read-only file system. Never retried."""


class StorageFullError(StorageError):
    """The storage is out of space or quota (``ENOSPC``, ``EDQUOT``). Never retried."""


class PartsNotSupportedError(ShardpipeError, NotImplementedError):
    """The backend cannot write a shard in parts."""


class AbilityNotSupportedError(ShardpipeError, NotImplementedError):
    """The backend lacks an ability (range writes, appends, range copies...)."""


class ConditionFailedError(StorageError):
    """A conditional write found the object not in the state it was conditioned on.

    Raised by a create-only write when the key already exists, and by a
    replace-if-unchanged write when the object changed since it was read.
    """


class VerificationError(ShardpipeError):
    """``verify`` found damaged shards."""


class WriteFailedError(ShardpipeError):
    """A write stopped part way on an error that is not shardpipe's own.

    A task raised something else (a source block that could not be computed,
    a bug): that error is this one's ``__cause__``, and the message says
    what was left behind and how to finish the write.
    """


class JobConflictError(ShardpipeError):
    """Another shardpipe job holds the array (its job marker is present).

    Attributes
    ----------
    marker : dict
        What the other job recorded: its id, host, process id, action and
        start time.
    """

    def __init__(self, message: str, marker: dict[str, object] | None = None) -> None:
        super().__init__(message)
        self.marker = marker or {}


class ShardConflictError(ConditionFailedError):
    """Shards changed under an update since it read them; the other writer's version stays.

    Attributes
    ----------
    keys : list of str
        The shards whose update lost the race.
    """

    def __init__(self, message: str, keys: list[str]) -> None:
        super().__init__(message)
        self.keys = keys

    def __reduce__(self) -> tuple[type[ShardConflictError], tuple[str, list[str]]]:
        return type(self), (str(self), self.keys)


class TransactionConflictError(ShardpipeError):
    """A commit lost a race: another commit reached the branch first.

    Nothing was committed; the session still holds the write's changes.

    Attributes
    ----------
    shards : dict of str to list of tuple of int
        Per array path, the shards both commits changed (empty when not known:
        the branch moved and no rebase was asked for).
    """

    def __init__(self, message: str, shards: dict[str, list[tuple[int, ...]]]) -> None:
        super().__init__(message)
        self.shards = shards

    def __reduce__(
        self,
    ) -> tuple[type[TransactionConflictError], tuple[str, dict[str, list[tuple[int, ...]]]]]:
        return type(self), (str(self), self.shards)
