"""The kinds of a write: a new array, a fill, an update, a resumed write.

What kind a write is gets decided once, when it is planned
(:func:`~shardpipe.write.prepare.prepare_write`,
:func:`~shardpipe.write.prepare.prepare_fill`,
:meth:`~shardpipe.write.spec.WriteSpec.resumed`), and is held as the ``mode``
of its :class:`~shardpipe.write.spec.WriteSpec`. Each kind owns what sets it
apart; planning, waves and tasks are the same for all:

* :class:`NewArray` begins by checking the target again, saving its job
  record and writing the metadata; it ends by marking the record complete.
* :class:`FillExisting` finds its metadata written (the xarray accessor lets
  xarray write it) and keeps no record.
* :class:`Resumed` compares its job record again and leaves alone the shards
  of its done waves and the complete others; it ends as a new array does.
* :class:`~shardpipe.write.update_mode.Update` (in its own module) takes
  an ``"update"`` marker once ``zarr.json`` is as planned, and deletes the
  records that no longer vouch for the shards; it ends by publishing an
  append's grown ``zarr.json`` and dropping its records of finished shards.

One way begins a job, run by :meth:`ShardedWrite.execute
<shardpipe.write.job.ShardedWrite.execute>` or as the first task of
:meth:`~shardpipe.write.job.ShardedWrite.to_delayed`: :meth:`WriteMode.begin`
(:meth:`WriteMode.take` takes the array's marker and begins under it; a
delayed write holds no marker, so ``begin`` makes sure no other job does).
After a failure :meth:`WriteMode.what_now` says what is left and what to do
(:func:`~shardpipe.journal.undo.undo_failed` rolls back the shards left
mid-update).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np
from dask.delayed import Delayed, delayed

from shardpipe import advice
from shardpipe.core.grid import Coords
from shardpipe.core.plan import WritePlan
from shardpipe.engine.reports import WriteReport
from shardpipe.engine.tasks import WriteTarget
from shardpipe.engine.update_tasks import UpdateTarget
from shardpipe.internals.zarr_core import ArrayV3Metadata
from shardpipe.journal.array_lock import acquire, release
from shardpipe.journal.job_record import save_record
from shardpipe.journal.markers import JobKeys, JobMarker
from shardpipe.storage.remembered import listing_once
from shardpipe.storage.resolve import ResolvedStore
from shardpipe.write.resume import (
    Resume,
    check_no_other_job,
    check_same_job,
    create_array,
)

ICECHUNK_FAILED = (
    "shardpipe: the write did not finish; none of its shards reached the Icechunk "
    "session (the metadata it wrote did: session.discard_changes() drops it)"
)
"""What a failed write into an Icechunk session leaves, whatever its kind."""


class WriteMode:
    """The kind of a write: how it begins and ends, and what it leaves alone.

    The attributes are what every kind answers; a kind sets those that are
    its own (the others keep these defaults).

    Attributes
    ----------
    lock : str
        The kind of the array's marker the job takes (``"write"``, ``"update"``).
    begin_task : str
        The name of the first task of a delayed write (``to_delayed``).
    starts_early : bool
        Whether the marker and metadata may be written while the job's graphs
        already compute (new arrays; :class:`~shardpipe.write.run.StartInBackground`).
    updates : bool
        Whether its shards exist and are merged (an update's tasks), else written whole.
    background_uploads : bool
        Whether its shards may go up in the background (the plan shows it).
    task_names : dict
        How the plan's summary names task kinds that the kind runs as others.
    create_kwargs : dict or None
        The arguments of ``zarr.create_array`` for a new array, else None.
    identity : dict or None
        What its job record holds (source and target metadata), saved beside
        the array so that ``resume=True`` can carry it on
        (:mod:`shardpipe.write.resume`); None when it keeps no record.
    skip : frozenset of shard coordinates
        Shards left alone because they are complete (a resumed write or update).
    first_wave : int
        The first wave not recorded as done; the shards of the waves before it
        are complete and not looked at again.
    wave_size : int or None
        Shards per wave, when the kind fixes it (a resumed write keeps its
        first run's).
    in_memory : numpy.ndarray or None
        An update's source given as a NumPy array (a small update runs in the
        calling thread: :func:`~shardpipe.write.run.run_in_thread`).
    """

    lock: ClassVar[str] = "write"
    begin_task: ClassVar[str] = "check-array"
    starts_early: ClassVar[bool] = True
    updates: ClassVar[bool] = False
    background_uploads: ClassVar[bool] = True
    task_names: ClassVar[dict[str, str]] = {}
    create_kwargs: dict[str, Any] | None = None
    identity: dict[str, Any] | None = None
    skip: frozenset[Coords] = frozenset()
    first_wave: int = 0
    wave_size: int | None = None
    in_memory: np.ndarray | None = None

    def take(
        self,
        target: ResolvedStore,
        keys: JobKeys,
        write_target: WriteTarget,
        metadata: ArrayV3Metadata,
    ) -> tuple[JobMarker, WriteTarget | UpdateTarget]:
        """Take the array's marker and :meth:`begin` under it (the marker let go if that fails).

        Returns the marker and what the job's tasks get.
        """
        marker = acquire(target.shards, keys, self.lock)
        try:
            self.begin(target, write_target, metadata, marker)
        except BaseException:
            release(target.shards, keys, marker)
            raise
        return marker, write_target

    def begin(
        self,
        target: ResolvedStore,
        write_target: WriteTarget,
        metadata: ArrayV3Metadata,
        holder: JobMarker | None = None,
        run: str | None = None,
    ) -> WriteTarget:
        """Check the target again and write or check the metadata, before any shard.

        ``holder`` is the job's marker, when it holds one (taken just before,
        it is not read again); without it (the first task of a delayed write)
        a marker of another job that may still run is an error. ``run`` is
        unique to the run of a delayed write (see
        :func:`~shardpipe.write.resume.create_array`). Returns ``write_target``
        unchanged, so that tasks can depend on the job having begun.
        """
        if holder is None:
            check_no_other_job(target, None, "write the array")
        return write_target

    def wave_done(self, target: ResolvedStore, shards_per_wave: int, done: int) -> None:
        """Record that the first ``done`` waves are written (kinds that keep a job record)."""

    def end(self, target: ResolvedStore) -> None:
        """What the job records or removes once every shard is written."""

    def end_delayed(
        self, result: Delayed, target: ResolvedStore, skipped: int, token: str
    ) -> Delayed:
        """The last task of a delayed write whose shards are ``result`` (:meth:`end`'s)."""
        return result

    def check_delayed(self) -> None:
        """Refuse ``to_delayed`` for kinds that must run at once."""

    def resumed(
        self, skip: frozenset[Coords], resume: Resume, first_wave: int, wave_size: int | None
    ) -> Resumed:
        """This write carried on after an interruption (see :class:`Resumed`)."""
        raise TypeError(f"a {type(self).__name__} write is not resumed this way")

    def what_now(self, target: ResolvedStore) -> str | None:
        """What a failure of the job leaves and what to do then, if there is anything to say."""
        return ICECHUNK_FAILED if target.transactional else None

    def summary_rows(self, plan: WritePlan, metadata: ArrayV3Metadata) -> list[tuple[str, str]]:
        """The rows the plan's summary shows of the kind itself."""
        return []

    def shards_note(self, skipped: int) -> str:
        """What the summary's ``shards`` row says of the shards left alone."""
        if self.skip or self.first_wave:
            return f"{skipped:,} complete already, skipped; "
        return ""


class RecordedMode(WriteMode):
    """A kind that keeps a job record beside the array, so that ``resume=True`` can carry it on."""

    identity: dict[str, Any]

    def wave_done(self, target: ResolvedStore, shards_per_wave: int, done: int) -> None:
        """Record the waves done in the job record (a resumed write starts after them)."""
        save_record(
            target,
            self.identity,
            "running",
            waves={"shards_per_wave": shards_per_wave, "done": done},
        )

    def end(self, target: ResolvedStore) -> None:
        """Mark the job record complete."""
        save_record(target, self.identity, "complete")

    def end_delayed(
        self, result: Delayed, target: ResolvedStore, skipped: int, token: str
    ) -> Delayed:
        """A last task that marks the job record complete."""
        done: Delayed = delayed(record_complete, pure=False)(
            result, target, self.identity, skipped, dask_key_name=f"record-complete-{token}"
        )
        return done

    def resumed(
        self, skip: frozenset[Coords], resume: Resume, first_wave: int, wave_size: int | None
    ) -> Resumed:
        """This write carried on after an interruption (see :class:`Resumed`)."""
        return Resumed(self.identity, resume, skip, first_wave, wave_size)

    def what_now(self, target: ResolvedStore) -> str | None:
        """The shards published are kept; ``resume=True`` writes the rest."""
        if target.transactional:
            return ICECHUNK_FAILED
        return (
            "shardpipe: the write did not finish; the shards it published are complete "
            f"and kept. Run the same write with {advice.setting('resume')} to write only the rest"
        )


@dataclass(frozen=True)
class NewArray(RecordedMode):
    """A new array: created when the job begins, over what was there with ``overwrite``.

    Attributes
    ----------
    create_kwargs : dict
        The arguments of ``zarr.create_array``.
    overwrite : bool
        Whether an existing node at the target is replaced.
    identity : dict
        What its job record holds.
    """

    begin_task: ClassVar[str] = "create-array"
    create_kwargs: dict[str, Any] = field()
    overwrite: bool = field()
    identity: dict[str, Any] = field()

    def take(
        self,
        target: ResolvedStore,
        keys: JobKeys,
        write_target: WriteTarget,
        metadata: ArrayV3Metadata,
    ) -> tuple[JobMarker, WriteTarget | UpdateTarget]:
        """Take the marker and create the array, listing the target once between changes.

        The marker's recovery lists the undo records, then the target is
        checked for what else is there (or, with ``overwrite``, listed to be
        removed): one listing of the target serves both
        (:func:`~shardpipe.storage.remembered.listing_once`), a round trip
        fewer before the first shard on an object store.
        """
        return super().take(listing_once(target), keys, write_target, metadata)

    def begin(
        self,
        target: ResolvedStore,
        write_target: WriteTarget,
        metadata: ArrayV3Metadata,
        holder: JobMarker | None = None,
        run: str | None = None,
    ) -> WriteTarget:
        """Create the array: its job record, then its metadata.

        See :func:`~shardpipe.write.resume.create_array`.
        """
        return create_array(
            target,
            self.create_kwargs,
            self.overwrite,
            write_target,
            holder,
            metadata=metadata,
            identity=self.identity,
            run=run,
        )


@dataclass(frozen=True)
class FillExisting(WriteMode):
    """A new, empty array whose metadata is already written, filled whole.

    The caller wrote the metadata (the xarray accessor lets xarray write every
    array's metadata and attributes); the job creates nothing and keeps no record.
    """


@dataclass(frozen=True)
class Resumed(RecordedMode):
    """A new array's write carried on after an interruption, into the array it created.

    Attributes
    ----------
    identity : dict
        Its job record, compared again when it begins: another job may have
        replaced the array meanwhile.
    resume : bool or "force"
        How the record is compared (:func:`~shardpipe.write.resume.check_same_job`).
    skip : frozenset of shard coordinates
        The complete shards of the waves not done, left alone.
    first_wave : int
        The first wave not recorded as done.
    wave_size : int or None
        The first run's shards per wave (None: chosen again).
    """

    identity: dict[str, Any] = field()
    resume: Resume = True
    skip: frozenset[Coords] = frozenset()
    first_wave: int = 0
    wave_size: int | None = None

    def begin(
        self,
        target: ResolvedStore,
        write_target: WriteTarget,
        metadata: ArrayV3Metadata,
        holder: JobMarker | None = None,
        run: str | None = None,
    ) -> WriteTarget:
        """Compare the job record again: another job may have replaced the array since planning."""
        super().begin(target, write_target, metadata, holder, run)
        if self.resume:
            check_same_job(target, self.identity, self.resume)
        return write_target


def record_complete(
    report: WriteReport, target: ResolvedStore, identity: dict[str, Any], skipped: int
) -> WriteReport:
    """Last task of a delayed write: mark its job record complete."""
    save_record(target, identity, "complete")
    return replace(report, shards_skipped=skipped)
