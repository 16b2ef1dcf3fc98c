"""The update kind of a write: a region write or an append into an existing array.

:class:`Update` (a :class:`~shardpipe.write.modes.WriteMode`, planned by
:func:`~shardpipe.write.prepare.prepare_write` when the target is an existing
array) takes an ``"update"`` marker once ``zarr.json`` is as planned
(:func:`take_for_update`, shared with batches of region writes), and deletes
the records that no longer vouch for the shards; it ends by publishing an
append's grown ``zarr.json`` (:func:`publish_grown`) and dropping its records
of finished shards.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from shardpipe import advice
from shardpipe.core.grid import Coords
from shardpipe.core.plan import WritePlan
from shardpipe.core.shard_update import DEFAULT_UNUSED_THRESHOLD
from shardpipe.engine.tasks import WriteTarget
from shardpipe.engine.update_tasks import UpdateTarget
from shardpipe.errors import ConditionFailedError, InvalidArgumentError, JobConflictError
from shardpipe.internals.zarr_core import ArrayV3Metadata
from shardpipe.journal.array_lock import acquire, release
from shardpipe.journal.job_record import delete_record
from shardpipe.journal.markers import JobKeys, JobMarker
from shardpipe.storage.base import ObjectVersion
from shardpipe.storage.resolve import ResolvedStore
from shardpipe.stored.metadata import metadata_bytes
from shardpipe.write.arguments import ExistingArray
from shardpipe.write.modes import WriteMode
from shardpipe.write.resume import forget_finished

UNFINISHED_UPDATE = (
    "shardpipe: the region write did not finish",
    "shardpipe: the append did not finish",
)
"""How the notes of an update that failed begin (:meth:`Update.what_now`): a caller with no
``resume`` of its own (a dataset write) drops them for its own."""


@dataclass(frozen=True)
class Update(WriteMode):
    """A region write or an append into an existing array.

    Attributes
    ----------
    existing : ExistingArray
        The array written into, where the source goes and the write strategy.
    rewrite_fits : bool
        Whether rewriting a whole shard fits the budget.
    skip : frozenset of shard coordinates
        Shards an interrupted run of the same update recorded as finished.
    in_memory : numpy.ndarray or None
        The source, when it was given as a NumPy array.
    """

    lock: ClassVar[str] = "update"
    starts_early: ClassVar[bool] = False
    updates: ClassVar[bool] = True
    background_uploads: ClassVar[bool] = False
    task_names: ClassVar[dict[str, str]] = {"write-shard": "update-shard"}
    existing: ExistingArray = field()
    rewrite_fits: bool = True
    skip: frozenset[Coords] = frozenset()
    in_memory: np.ndarray | None = field(default=None, compare=False, repr=False)

    def take(
        self,
        target: ResolvedStore,
        keys: JobKeys,
        write_target: WriteTarget,
        metadata: ArrayV3Metadata,
    ) -> tuple[JobMarker, WriteTarget | UpdateTarget]:
        """Take the array for the update (:func:`take_for_update`); its tasks get an update target.

        Inside a transaction the grown ``zarr.json`` of an append is published
        at once: nobody sees it early, and Icechunk takes chunks only inside
        the array's shape.
        """
        existing = self.existing
        marker = take_for_update(
            target,
            keys,
            existing.version,
            since="this update was planned; plan it again",
            keep=existing.update,
        )
        try:
            update = UpdateTarget(
                write=write_target,
                strategy=existing.strategy,
                threshold=DEFAULT_UNUSED_THRESHOLD,
                rewrite_fits=self.rewrite_fits,
                keys=keys,
                marker=marker,
                update=existing.update,
                in_place_fits=existing.in_place_fits,
            )
            if target.transactional and existing.grown is not None:
                publish_grown(target, existing)
        except BaseException:
            release(target.shards, keys, marker)
            raise
        return marker, update

    def end(self, target: ResolvedStore) -> None:
        """Publish an append's grown ``zarr.json`` (outside a transaction); drop shard records."""
        if self.existing.grown is not None and not target.transactional:
            publish_grown(target, self.existing)
        forget_finished(target)

    def check_delayed(self) -> None:
        """An update runs at once: it holds the array's marker while it changes shards."""
        raise InvalidArgumentError(
            "compute",
            "a region write or an append runs at once (it holds the array's job marker "
            "while it changes shards)",
            "Use compute=True (or ShardedWrite.execute())",
        )

    def what_now(self, target: ResolvedStore) -> str | None:
        """An update that failed leaves each shard old or new; running it again with
        ``resume`` keeps the shards it finished. An append keeps the array's shape."""
        if target.transactional:
            return super().what_now(target)
        if self.existing.grown is None:
            return (
                f"{UNFINISHED_UPDATE[0]}: each shard holds its old or its "
                f"new data; the same region write with {advice.setting('resume')} writes the "
                "shards it did not finish"
            )
        grown_from = tuple(self.existing.metadata.shape)
        return (
            f"{UNFINISHED_UPDATE[1]}: the array keeps its shape {grown_from}; "
            "shards it wrote past that shape are not read (verify lists them) until the "
            f"same append is run again with {advice.setting('resume')}, which keeps them"
        )

    def summary_rows(self, plan: WritePlan, metadata: ArrayV3Metadata) -> list[tuple[str, str]]:
        """What the update does (a region write or an append) and to how many inner chunks."""
        existing = self.existing
        what = "append" if existing.grown is not None else "region write"
        old_shape = tuple(existing.metadata.shape)
        return [
            (
                "update",
                f"{what} at {plan.placement.region} of {old_shape}"
                + (f" (grown to {tuple(metadata.shape)})" if existing.grown else "")
                + f", write_strategy {existing.strategy!r}",
            ),
            (
                "inner chunks",
                f"{plan.n_chunks_full:,} replaced, {plan.n_chunks_partial:,} merged with "
                "their old content",
            ),
        ]


def publish_grown(target: ResolvedStore, existing: ExistingArray) -> None:
    """Publish the grown ``zarr.json`` of an append, if nobody changed it meanwhile."""
    assert existing.grown is not None
    try:
        target.shards.put(
            target.key("zarr.json"),
            [metadata_bytes(existing.grown)],
            if_version=existing.version,
        )
    except ConditionFailedError as err:
        raise JobConflictError(
            "the array's zarr.json changed during the append; its shards hold the new "
            "data but the array was not grown. Check what else writes this array"
        ) from err


def take_for_update(
    target: ResolvedStore,
    keys: JobKeys,
    version: ObjectVersion | None,
    *,
    since: str,
    keep: str | None = None,
) -> JobMarker:
    """Take the marker of the array at ``target`` for an update of it as read at ``version``.

    Its ``zarr.json`` must still be that version, else
    :class:`~shardpipe.errors.JobConflictError` is raised with the marker let
    go: nothing is written (``since`` ends its message: when the version was
    read, and the fix). Then, the shards being about to change, the record
    of the write that made them vouches for them no longer, nor do other
    updates' records of finished shards (all but update ``keep``'s): they
    are deleted. A planned update (:meth:`Update.take`) and a batch of region
    writes (:func:`~shardpipe.write.run.run_batch`) both begin here.
    """
    store = target.shards
    marker = acquire(store, keys, "update")
    try:
        if store.version(target.key("zarr.json")) != version:
            raise JobConflictError(f"the array's zarr.json changed since {since}")
        delete_record(target)
        forget_finished(target, keep=keep)
    except BaseException:
        release(store, keys, marker)
        raise
    return marker
