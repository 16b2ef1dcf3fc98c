"""Committing a write into an Icechunk session: the ``commit=`` and ``rebase=`` arguments.

A write into a writable Icechunk ``Session`` leaves its changes in the
session (see :mod:`shardpipe.storage.icechunk.store`). With ``commit="message"``
the front-ends commit them at the end and report the snapshot id; with
``rebase=True`` as well, commits that reached the branch meanwhile are
rebased onto when they changed no shard this write changed.
"""

from __future__ import annotations

import warnings

from shardpipe.errors import InvalidArgumentError
from shardpipe.storage.icechunk.store import IcechunkShardStore
from shardpipe.storage.resolve import ResolvedStore


def check_writable(target: ResolvedStore) -> None:
    """Refuse a read-only Icechunk session as the target of a write (before anything is written)."""
    if target.transactional and target.zarr_store.read_only:
        shards = target.shards
        assert isinstance(shards, IcechunkShardStore) and shards.session is not None
        raise InvalidArgumentError(
            "store",
            f"the Icechunk session on snapshot {shards.session.snapshot_id} is read-only",
            "Open a writable one: repo.writable_session('main') (or another branch)",
        )


def check_commit(commit: object, rebase: object, target: ResolvedStore) -> tuple[str | None, bool]:
    """Check ``commit`` and ``rebase`` against the write's ``target``; return them.

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        For a message that is not a non-empty string, ``commit`` on a target
        that is not an Icechunk session, or ``rebase`` without ``commit``.
    """
    if commit is not None and not (isinstance(commit, str) and commit.strip()):
        raise InvalidArgumentError(
            "commit",
            f"expected a commit message, got {commit!r}",
            'Pass a non-empty string such as commit="write temperature", or leave it out',
        )
    if not isinstance(rebase, bool):
        raise InvalidArgumentError(
            "rebase", f"expected True or False, got {rebase!r}", "Pass rebase=True or leave it out"
        )
    if commit is not None and not target.transactional:
        raise InvalidArgumentError(
            "commit",
            f"{commit!r}, but {target.zarr_store} is not an Icechunk session: its writes "
            "take effect as they happen",
            "Leave commit out, or pass a writable Icechunk Session as the store",
        )
    if rebase and commit is None:
        raise InvalidArgumentError(
            "rebase",
            "True without commit: rebasing happens when committing",
            'Pass commit="message" too, or commit the session yourself',
        )
    return commit, rebase


def commit_write(target: ResolvedStore, message: str, *, rebase: bool) -> str:
    """Commit the session the write went into; return the new snapshot's id.

    Raises
    ------
    shardpipe.errors.TransactionConflictError
        If another commit reached the branch first (and, with ``rebase``,
        changed a shard this write changed); nothing is committed.
    """
    shards = target.shards
    assert isinstance(shards, IcechunkShardStore)
    return shards.commit(message, rebase=rebase)


def snapshot_id_returned(function: str, planned: str, snapshot_id: str) -> str:
    """The snapshot id ``function(commit=...)`` still returns, with a ``FutureWarning``.

    Returning the id with ``commit`` and the array without made the return
    type depend on an argument (issue 32). From shardpipe 0.3 ``function``
    returns the written array in both cases; the id is the ``snapshot_id``
    of the report that ``planned(...).execute(commit=...)`` returns.
    """
    warnings.warn(
        f"{function}(commit=...) returns the Icechunk snapshot id in shardpipe 0.2 and will "
        f"return the written array from 0.3, as without commit. For the id, call "
        f"{planned}(...).execute(commit=...): its report's snapshot_id",
        FutureWarning,
        stacklevel=4,  # the caller of the public function (through its parameter wrapper)
    )
    return snapshot_id
