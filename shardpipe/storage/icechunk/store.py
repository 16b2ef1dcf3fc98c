"""Shards written into an Icechunk session, inside its transaction.

An Icechunk repository keeps Zarr keys in snapshots: a writable
``Session`` stages changes that nobody sees until it commits. Dask tasks
cannot share the user's session across processes, so each publishing task
writes through a fork of it (:meth:`IcechunkShardStore.collecting`) and
hands the fork back in its report; the graph merges the forks on the way
back (:func:`shardpipe.engine.reports.add_reports`) and the client merges the sum
into the user's session (:meth:`IcechunkShardStore.merge_changes`).

Only the chunk references travel: Icechunk writes a chunk's bytes to the
repository's storage when the fork sets it (chunks larger than the
repository's inline limit), so a fork holds keys and locations, not data.

What differs from a file system or S3:

* shard objects are put whole (``Store.set``); there is no write at an
  offset, append or range copy, so updates of existing shards are rewrites
  inside the transaction;
* a shard written in parts is joined in the memory of its ``stamp-shard``
  task (the parts travel there as bytes, between workers, never through
  the client): Icechunk has no multipart staging;
* shardpipe's job marker, records and staging keys are not Zarr keys, which
  Icechunk refuses; they are kept in this object instead (in the client's
  process, copied to the workers with it). A transaction needs no journal:
  a kill leaves the repository at its last commit.
"""

from __future__ import annotations

import pickle
import threading
from collections.abc import Buffer, Callable, Iterator, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from shardpipe.errors import AbilityNotSupportedError, TransactionConflictError
from shardpipe.internals.zarr_core import sync
from shardpipe.storage.base import (
    ObjectVersion,
    StoreAbilities,
)
from shardpipe.storage.keys import JOB_DIR, edge_key
from shardpipe.storage.parts import PartReceipt, PartsHandle
from shardpipe.storage.zarr_store import ZarrShardStore, content_version

if TYPE_CHECKING:
    from icechunk import ForkSession, Session
    from zarr.abc.store import Store

_TASK_FORK: ContextVar[ForkSession | None] = ContextVar("shardpipe_icechunk_fork", default=None)
"""The fork the running publishing task writes through (None outside such a task)."""


class IcechunkChanges:
    """What one or more tasks wrote: a fork of the session holding their changes.

    Parameters
    ----------
    fork : icechunk.ForkSession
        The fork; pickled as Icechunk pickles forks (its change set, no chunk data).
    """

    def __init__(self, fork: ForkSession) -> None:
        self.fork = fork

    def __repr__(self) -> str:
        return f"IcechunkChanges({self.fork!r})"

    def merged(self, other: IcechunkChanges) -> IcechunkChanges:
        """Return the changes of both: ``other``'s fork merged into this one."""
        self.fork.merge(other.fork)
        return self


def _changed_shards(session: Session) -> dict[str, list[tuple[int, ...]]]:
    """Per array path, the shards (Icechunk's chunks) the session changed."""
    return {
        path.lstrip("/"): sorted(tuple(c) for c in chunks)
        for path, chunks in session.status().updated_chunks.items()
    }


def _describe(path: str, shards: list[tuple[int, ...]], most: int = 8) -> str:
    listed = ", ".join(str(s) for s in shards[:most])
    more = f" and {len(shards) - most} more" if len(shards) > most else ""
    return f"array {path!r} shards {listed}{more}"


def _absent_unless_zarr[R](read: Callable[[str], R | None], key: str) -> R | None:
    """``read(key)``, or None where Icechunk refuses ``key`` as no Zarr key (nothing is there)."""
    import icechunk

    try:
        return read(key)
    except icechunk.InvalidInputError:
        return None


def _is_scratch(key: str) -> bool:
    """Whether ``key`` is one of shardpipe's own (a marker, a record, staging)."""
    return JOB_DIR in key.split("/")


class IcechunkShardStore(ZarrShardStore):
    """Shards written through forks of a writable Icechunk session.

    Parameters
    ----------
    session : icechunk.Session
        A writable session (not a fork): writes outside a publishing task
        (the array's metadata, a grown ``zarr.json``) go to it directly. A
        read-only session serves reads (``verify``, ``info``) only.
    """

    abilities = StoreAbilities(
        parts=True,
        create_only=True,
        joins_buffers=True,
        transactional=True,
        parts_in_memory=True,
        ranges_past_the_end=False,
    )

    def __init__(self, session: Session) -> None:
        self.session: Session | None = session
        self._base: bytes | None = None
        self._base_fork: ForkSession | None = None
        self._lock = threading.Lock()
        self._scratch: dict[str, bytes] = {}

    def __repr__(self) -> str:
        return f"IcechunkShardStore({self})"

    def __str__(self) -> str:
        session = self.session
        if session is None:
            return "a fork of an Icechunk session"
        mode = "read-only" if session.read_only else "writable"
        branch = f"on branch {session.branch!r} " if session.branch else ""
        return f"{mode} Icechunk session {branch}from snapshot {session.snapshot_id}"

    def __getstate__(self) -> dict[str, Any]:
        """Travel as a fork of the session (taken once, after the metadata is written).

        A read-only session travels as itself (Icechunk pickles those).
        """
        if self.session is not None and self.session.read_only:
            return {"read_only": self.session, "base": None, "scratch": dict(self._scratch)}
        return {"read_only": None, "base": self._fork_bytes(), "scratch": dict(self._scratch)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.session = state["read_only"]
        self._base = state["base"]
        self._base_fork = None
        self._lock = threading.Lock()
        self._scratch = dict(state["scratch"])

    def _fork_bytes(self) -> bytes:
        """The pickled fork every task copies; taken from the session when first needed."""
        with self._lock:
            if self._base is None:
                assert self.session is not None
                self._base = pickle.dumps(self.session.fork())
            return self._base

    @property
    def store(self) -> Store:
        """The zarr store to use now: the running task's fork, else the session (or a fork)."""
        fork = _TASK_FORK.get()
        if fork is not None:
            return fork.store
        if self.session is not None:
            return self.session.store
        with self._lock:
            if self._base_fork is None:
                assert self._base is not None
                self._base_fork = pickle.loads(self._base)
            return self._base_fork.store

    @store.setter
    def store(self, value: Store) -> None:  # ZarrShardStore.__init__ is not called
        raise AttributeError("IcechunkShardStore writes through its session")

    # -- transactions ------------------------------------------------------------
    def collecting[R](self, work: Callable[[], R]) -> tuple[R, IcechunkChanges | None]:
        """Run ``work`` writing through a fresh fork of the session; return the fork's changes."""
        fork: ForkSession = pickle.loads(self._fork_bytes())
        token = _TASK_FORK.set(fork)
        try:
            result = work()
        finally:
            _TASK_FORK.reset(token)
        return result, (IcechunkChanges(fork) if fork.has_uncommitted_changes else None)

    def merge_changes(self, changes: IcechunkChanges) -> None:  # type: ignore[override]
        """Merge a write's changes into the session (in the client); later writes fork anew."""
        if self.session is None:
            raise AbilityNotSupportedError("changes are merged into the session, in the client")
        self.session.merge(changes.fork)
        with self._lock:
            self._base = None
            self._base_fork = None

    def commit(self, message: str, *, rebase: bool = False) -> str:
        """Commit the session; return the new snapshot's id.

        With ``rebase``, commits that reached the branch meanwhile are
        rebased onto when no chunk (shard) was changed by both; otherwise
        any such commit is a conflict.

        Raises
        ------
        shardpipe.errors.TransactionConflictError
            Naming the arrays and shards; nothing was committed and the
            session still holds the changes.
        """
        import icechunk

        assert self.session is not None
        session = self.session
        mine = _changed_shards(session)
        try:
            if rebase:
                return session.commit(message, rebase_with=icechunk.ConflictDetector())
            return session.commit(message)
        except icechunk.RebaseFailedError as err:
            both = {
                c.path.lstrip("/"): [tuple(x) for x in c.conflicted_chunks or []]
                for c in err.conflicts
            }
            raise TransactionConflictError(
                f"commit {message!r} on branch {session.branch!r} conflicts with snapshot "
                f"{err.snapshot}, committed after this session began: "
                + "; ".join(_describe(path, shards) for path, shards in both.items())
                + ". Both changed these shards, so neither rebase nor merge can keep both. "
                "Nothing was committed; the session still holds this write's changes: "
                "session.discard_changes() drops them, or write the region again in a new "
                "session",
                both,
            ) from err
        except icechunk.ConflictError as err:
            raise TransactionConflictError(
                f"commit {message!r}: branch {session.branch!r} moved from "
                f"{err.expected_parent} to {err.actual_parent} (another session committed) "
                f"while this write changed "
                + ("; ".join(_describe(p, s) for p, s in mine.items()) or "nothing")
                + ". Nothing was committed; the session still holds the changes. Pass "
                "rebase=True to rebase them and commit when no shard was changed by both",
                {},
            ) from err

    # -- whole objects -----------------------------------------------------------
    def put(
        self,
        key: str,
        buffers: Sequence[Buffer],
        *,
        if_absent: bool = False,
        if_version: ObjectVersion | None = None,
    ) -> None:
        """Set ``key`` in the transaction (shardpipe's own keys are kept in this object)."""
        if not _is_scratch(edge_key(key, self)):
            super().put(key, buffers, if_absent=if_absent, if_version=if_version)
            return
        data = b"".join(memoryview(b).cast("B") for b in buffers)
        with self._lock:
            found = self._scratch.get(key)
            if (if_absent and found is not None) or (
                if_version is not None and (found is None or content_version(found) != if_version)
            ):
                raise self._condition_failed(
                    key,
                    "no object" if if_absent else f"version {if_version}",
                    None if found is None else content_version(found),
                )
            self._scratch[key] = data

    def get(self, key: str) -> bytes | None:
        """Return the bytes at ``key`` as the transaction sees them, or ``None``."""
        if _is_scratch(edge_key(key, self)):
            with self._lock:
                return self._scratch.get(key)
        return _absent_unless_zarr(super().get, key)

    def get_range(self, key: str, start: int, stop: int) -> bytes:
        """Return ``[start, stop)`` of the object at ``key``."""
        if _is_scratch(edge_key(key, self)):
            data = self.get(key)
            if data is None:
                raise FileNotFoundError(key)
            return data[start:stop]
        return super().get_range(key, start, stop)

    def size(self, key: str) -> int | None:
        """Return the size of the object at ``key``, or ``None`` when absent."""
        if _is_scratch(edge_key(key, self)):
            data = self.get(key)
            return None if data is None else len(data)
        return _absent_unless_zarr(super().size, key)

    def version(self, key: str) -> ObjectVersion | None:
        """Return the version of the object at ``key``, or ``None`` when absent."""
        return _absent_unless_zarr(super().version, key)

    def delete(self, key: str) -> None:
        """Remove ``key`` if present."""
        if _is_scratch(edge_key(key, self)):
            with self._lock:
                self._scratch.pop(key, None)
            return
        if super().size(key) is not None:
            super().delete(key)

    def list(self, prefix: str) -> Iterator[str]:
        """Iterate over the keys that start with ``prefix``, sorted as strings.

        Icechunk lists only below a group or an array: the nearest one
        above ``prefix`` is listed and the keys filtered; a listed key that
        could lead outside the store is refused.
        """
        if _is_scratch(edge_key(prefix, self, prefix=True)):
            with self._lock:
                yield from sorted(k for k in self._scratch if k.startswith(prefix))
            return
        import icechunk

        store, folder = self.store, prefix.rpartition("/")[0]

        async def collect(where: str) -> list[str]:
            return [k async for k in store.list_prefix(where) if k.startswith(prefix)]

        while True:
            try:
                found = sync(collect(folder))
                break
            except icechunk.InvalidInputError:
                if not folder:
                    raise
                folder = folder.rpartition("/")[0]
        yield from sorted(edge_key(key, self) for key in found)

    # -- parts, joined in memory ---------------------------------------------------
    def begin_parts(self, key: str, staging: str, *, any_order: bool = False) -> PartsHandle:
        """Start a shard in parts: nothing is staged, the parts travel in their receipts.

        Parts lie by their numbers, whatever ``any_order`` says.
        """
        edge_key(staging, self, prefix=True)
        return PartsHandle(edge_key(key, self), "in-memory", staging)

    def write_part(
        self, handle: PartsHandle, number: int, buffers: Sequence[Buffer]
    ) -> PartReceipt:
        """Hand the part's bytes on to ``finish_parts`` in its receipt."""
        edge_key(handle.key, self)
        data = b"".join(memoryview(b).cast("B") for b in buffers)
        return PartReceipt(number, len(data), payload=data)

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
        """Join ``head``, the parts in order and ``tail``, and set the shard in the transaction."""
        if not receipts and not head and not tail:
            return
        ordered = sorted(receipts, key=lambda r: r.number)
        payloads = [r.payload for r in ordered]
        if any(p is None for p in payloads):
            raise ValueError(f"{handle.key!r}: a part's receipt carries no bytes")
        buffers = [head, *(p for p in payloads if p is not None), tail]
        self.put(handle.key, buffers, if_absent=if_absent, if_version=if_version)

    def abort_parts(self, handle: PartsHandle) -> None:
        """Nothing was staged: nothing to undo."""
        edge_key(handle.key, self)


def is_icechunk(store: Any) -> bool:
    """Whether ``store`` is an Icechunk ``Session`` or ``IcechunkStore`` (without importing it)."""
    module = type(store).__module__
    return module == "icechunk" or module.startswith("icechunk.")


def icechunk_backend(store: Any) -> tuple[Store, IcechunkShardStore]:
    """The zarr store and the shard backend of an Icechunk ``Session`` or ``IcechunkStore``.

    A read-only session is accepted here (reads); writes refuse it
    (:func:`shardpipe.write.arguments.check_writable`).

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        For a fork (which cannot be committed).
    """
    from icechunk import ForkSession, IcechunkStore, Session

    from shardpipe.errors import InvalidArgumentError

    if isinstance(store, IcechunkStore):
        store = store.session
    if not isinstance(store, Session):
        raise InvalidArgumentError(
            "store",
            f"expected an Icechunk Session or IcechunkStore, got {type(store).__name__}",
            "Pass repo.writable_session('main') or its .store",
        )
    if isinstance(store, ForkSession):
        raise InvalidArgumentError(
            "store",
            "an Icechunk ForkSession cannot be committed, and shardpipe forks the session itself",
            "Pass the writable Session you would fork (repo.writable_session('main'))",
        )
    return store.store, IcechunkShardStore(store)
