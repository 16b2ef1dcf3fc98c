"""Writes into an Icechunk session: a writable session, and what ``commit=`` returns.

A write into a writable Icechunk ``Session`` leaves its changes in the
session (see :mod:`shardpipe.storage.icechunk.store`). With ``commit="message"``
the runner commits them at the end and reports the snapshot id
(:mod:`shardpipe.write.runner`, the one commit bracket); with ``rebase=True``
as well, commits that reached the branch meanwhile are rebased onto when they
changed no shard this write changed.
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
