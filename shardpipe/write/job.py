"""The write job: a validated, planned write that can be held, inspected and run.

:func:`~shardpipe.write.prepare.prepare_write` checks every argument, resolves the
store, builds the array's metadata in memory and plans the write (a new array,
a region of an existing one, or an append), writing nothing. The
:class:`ShardedWrite` it returns shows the plan (``print(job)``, or a table
in a notebook), runs it (:meth:`ShardedWrite.execute`), or hands it over as a
Dask ``Delayed`` (:meth:`ShardedWrite.to_delayed`). ``to_sharded_zarr`` is
``prepare_write(...).execute()``.

While it runs, a job holds the array's marker (:mod:`shardpipe.journal.markers`): a
new array is created after it is taken, an update checks that ``zarr.json``
did not change since planning, and an append publishes the grown metadata
after every shard.

A job runs in waves of shards (:mod:`shardpipe.core.waves`,
:mod:`shardpipe.engine.streaming`): each wave's graph is built from the source when
the wave is about to run, so neither the client nor the scheduler ever holds
the graph of a whole petabyte array. A small write is one wave.
"""

from __future__ import annotations

import itertools
import uuid
from dataclasses import dataclass, replace
from typing import Any

import zarr
from dask.delayed import Delayed, delayed
from zarr.storage import StorePath

from shardpipe.core.display import html_table, text_table
from shardpipe.engine.graph import build_write_graph
from shardpipe.engine.reports import WriteReport
from shardpipe.errors import InvalidArgumentError
from shardpipe.internals.zarr_core import AsyncArray
from shardpipe.write.creation import check_metadata_written, create_array, record_complete
from shardpipe.write.runner import Pass, PassReports, run_job
from shardpipe.write.spec import WriteSpec
from shardpipe.write.summary import summary_rows


@dataclass(frozen=True, repr=False)
class ShardedWrite(WriteSpec):
    """A write of a Dask array into a sharded Zarr v3 array, validated and planned.

    Made by :func:`~shardpipe.write.prepare.prepare_write`; nothing is written
    until :meth:`execute` runs or the :meth:`to_delayed` result is computed.
    Its attributes are those of :class:`~shardpipe.write.spec.WriteSpec`.
    """

    def summary_rows(self) -> list[tuple[str, str]]:
        """The plan's summary as ``(label, value)`` rows (what ``repr`` and the HTML show)."""
        return summary_rows(self)

    def __repr__(self) -> str:
        return text_table("ShardedWrite", self.summary_rows())

    def _repr_html_(self) -> str:
        return html_table("ShardedWrite", self.summary_rows())

    def to_delayed(self) -> Delayed:
        """Return the write as a ``dask.delayed.Delayed``; nothing is written until it is computed.

        Its first task writes the metadata (after checking the target once
        more); every task touching storage waits for it. It computes to a
        :class:`~shardpipe.engine.reports.WriteReport`. Piece tasks encode where the
        blocks live, so the graph suits every scheduler. After a failed
        computation, :func:`shardpipe.cleanup` removes what it left.

        The graph holds every shard of the write at once; :meth:`execute`
        runs large writes wave by wave instead (see
        :meth:`~shardpipe.write.spec.WriteSpec.wave_schedule`).
        """
        if self.existing is not None:
            raise InvalidArgumentError(
                "compute",
                "a region write or an append runs at once (it holds the array's job marker "
                "while it changes shards)",
                "Use compute=True (or ShardedWrite.execute())",
            )
        if self.target.transactional:
            raise InvalidArgumentError(
                "compute",
                "False, but a write into an Icechunk session runs at once: the changes its "
                "tasks make come back and are merged into the session in this process",
                "Use compute=True (or ShardedWrite.execute())",
            )
        token = uuid.uuid4().hex
        if self.create_kwargs is None:
            target_d = delayed(check_metadata_written, pure=False)(
                self.target,
                self.write_target(token),
                self.identity,
                self.resume,
                dask_key_name=f"check-array-{token}",
            )
        else:
            target_d = delayed(create_array, pure=False)(
                self.target,
                self.create_kwargs,
                self.overwrite,
                self.write_target(token),
                metadata=self.metadata,
                identity=self.identity,
                run=token,
                dask_key_name=f"create-array-{token}",
            )
        skip = self.skip
        if self.first_wave:  # one graph: leave the done waves out shard by shard
            schedule = self.wave_schedule()
            waves = (schedule.wave(k) for k in range(min(self.first_wave, schedule.n_waves)))
            skip = skip | {c for wave in waves for c in itertools.product(*wave.ranges)}
        graph = build_write_graph(self.source, self.plan, target_d, self.key_of(), token, skip=skip)
        if self.identity is None:
            return graph.result
        done: Delayed = delayed(record_complete, pure=False)(
            graph.result,
            self.target,
            self.identity,
            self.n_shards_skipped,
            dask_key_name=f"record-complete-{token}",
        )
        return done

    def execute(
        self, *, progress: bool = False, commit: str | None = None, rebase: bool = False
    ) -> WriteReport:
        """Write the metadata, then every shard; return what was written.

        Parameters
        ----------
        progress : bool
            Show a progress bar over shards and bytes (console or notebook),
            on any scheduler.
        commit : str, optional
            Into an Icechunk session: commit it with this message at the end
            (the report's ``snapshot_id`` is the new snapshot). Without it the
            session holds the changes for you to commit.
        rebase : bool
            With ``commit``: rebase onto commits that reached the branch
            meanwhile when none changed a shard this write changed.

        Returns
        -------
        WriteReport
            Shards written and left out as empty, bytes, inner chunks, seconds.

        Raises
        ------
        shardpipe.errors.ArrayExistsError
            If a node appeared at the target since planning and ``overwrite``
            is False.
        shardpipe.errors.TransactionConflictError
            If the commit lost a race with another (see :mod:`shardpipe.write.runner`).
        Exception
            Whatever a task raised; shards already published stay, staging and
            unfinished uploads are removed first (a failure of that cleanup is
            added to the error's notes, never in its place). Into an Icechunk
            session, nothing of a failed write's shards reaches the session.
        """
        return run_job(self, progress=progress, commit=commit, rebase=rebase)

    def passes(self) -> list[Pass]:
        """One pass: this write (see :mod:`shardpipe.write.runner`)."""
        return [Pass("write", lambda _: [self])]

    def finish(self, reports: PassReports, seconds: float, snapshot_id: str | None) -> WriteReport:
        """The write's report, with the snapshot the run committed (if any)."""
        return replace(reports[0][0], snapshot_id=snapshot_id)

    def open(self) -> zarr.Array[Any]:
        """Open the written array for reading and writing.

        The array's metadata is the job's (written by it, or found by it),
        so the array is made from it without reading ``zarr.json`` again
        (about a millisecond a call: much of a small update's time).
        """
        where = StorePath(self.target.zarr_store, self.target.path)
        return zarr.Array(AsyncArray(metadata=self.metadata, store_path=where))
