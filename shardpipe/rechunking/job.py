"""A planned rechunk, ``RechunkJob``: its plan, its passes, its report.

One pass writes the target from the source. Two passes first copy the
source into the intermediate (:mod:`shardpipe.rechunking.intermediate`),
then write the target from the copy. Both passes advance one progress bar
(:class:`~shardpipe.engine.progress.PassesBar`: blocks copied, then shards
written) and both are counted in the report
(:attr:`~shardpipe.WriteReport.passes`).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from typing import Any

from dask.delayed import Delayed

from shardpipe import advice
from shardpipe.core.display import format_bytes, html_table, text_table
from shardpipe.core.grid import Shape
from shardpipe.core.memory import HOLD_SHARE
from shardpipe.core.plan_costs import ONE_PASS, SMALLER_BLOCKS, TWO_PASSES
from shardpipe.core.rechunk_plans import PlanChoice
from shardpipe.core.source_blocks import ReadCost, blocks_read_cost
from shardpipe.engine.progress import PassesBar
from shardpipe.engine.reports import PassReport, WriteReport
from shardpipe.errors import InvalidArgumentError
from shardpipe.rechunking.copy_record import (
    delete_copy_record,
    forget_copy,
    save_copy_record,
)
from shardpipe.rechunking.intermediate import Intermediate
from shardpipe.rechunking.source import Source
from shardpipe.storage.keys import INTERMEDIATE_RECORD
from shardpipe.storage.resolve import ResolvedStore
from shardpipe.write.job import Pass, PassReports, ShardedWrite, run_job
from shardpipe.write.options import RUN_PARAMETERS
from shardpipe.write.parameters import shares_parameters

COPY = "copy into the intermediate"
"""The name of the first pass of a two-pass rechunk."""

WRITE = "rechunk from the intermediate"
"""The name of its second pass."""


@dataclass(frozen=True)
class RechunkJob:
    """A planned rechunk: how the source is read and the write job that writes the target.

    Attributes
    ----------
    source : Source
        What is read.
    block_shape : tuple of int
        The Dask blocks the source is read in.
    cost : ReadCost
        Reads, bytes read and read amplification.
    write : shardpipe.ShardedWrite
        The write of the blocks into the target (its plan, memory, tasks).
    intermediate : Intermediate or None
        For a two-pass rechunk: the copy, and how the first pass fills it
        from ``origin``; ``source`` then stands for the copy.
    origin : Source or None
        What the first pass reads.
    straddles : bool
        Whether one pass gathers raw pieces of inner chunks across blocks.
    replan : callable or None
        Plans the second pass once the copy is written.
    held : int
        Bytes one pass would hold between its tasks
        (:func:`~shardpipe.rechunking.memory.one_pass_hold`).
    one_pass : shardpipe.ShardedWrite or None
        For two passes chosen automatically (no ``temp_store`` given): the
        one-pass write, run instead where two passes cannot (``compute=False``).
    weighed : PlanChoice or None
        The plans the cost model weighed (:mod:`shardpipe.core.rechunk_plans`),
        shown in the summary with the one it rates best.
    stale : dict or None
        The record of a copy an earlier two-pass rechunk left at the target
        (:mod:`~shardpipe.rechunking.copy_record`) that this job does not
        resume from: the job deletes it (and the copy, if shardpipe placed
        it) before it writes.
    """

    source: Source
    block_shape: Shape
    cost: ReadCost
    write: ShardedWrite
    intermediate: Intermediate | None = None
    origin: Source | None = None
    straddles: bool = False
    replan: Callable[[Source, Shape], ShardedWrite] | None = None
    held: int = 0
    one_pass: ShardedWrite | None = None
    stale: dict[str, Any] | None = None
    weighed: PlanChoice | None = None
    _done: list[PassReport] = field(default_factory=list, repr=False, compare=False)

    def summary_rows(self) -> list[tuple[str, str]]:
        """The plan as ``(label, value)`` rows: the reads, then the write job's rows."""
        cost = self.cost
        return [
            (
                "read",
                f"{self.source.name}: {cost.reads:,} reads of {self.source.read_unit} "
                f"({format_bytes(cost.nbytes_read)}, read amplification "
                f"{cost.amplification:.2f}x) in Dask blocks of {self.block_shape}",
            ),
            ("intermediate", self._intermediate_row()),
            *self._weighed_rows(),
            *self.write.summary_rows(),
        ]

    def _weighed_rows(self) -> list[tuple[str, str]]:
        """The plans the cost model weighed, and which it rates best against what runs."""
        if self.weighed is None:
            return []
        budget = self.write.plan.max_mem
        rows = [row for c in self.weighed.candidates for row in c.rows(budget)]
        best = self.weighed.chosen
        runs = self._kind()
        said = f"{best.kind}, {self.weighed.reason}"
        if best.kind != runs:
            said += (
                f"; this plan runs {runs}, chosen by the write plan's per-task memory, what "
                "one pass holds between tasks, and where a copy can go (the rows above and below)"
            )
        elif runs == ONE_PASS and best.block_shape != self.block_shape:
            said += (
                f"; this plan reads in blocks of {self.block_shape}, the largest whose write "
                f"plan fits {advice.name('max_mem')} (what they hold between tasks is in the "
                "intermediate row, the memory per task below)"
            )
        return [*rows, ("model's choice", said)]

    def _kind(self) -> str:
        """Which of the model's ways this plan is."""
        if self.intermediate is not None:
            return TWO_PASSES
        return ONE_PASS if self.cost.amplification <= 1.0 else SMALLER_BLOCKS

    def _intermediate_row(self) -> str:
        budget = self.write.plan.max_mem
        held = f"{format_bytes(self.held)} between tasks"
        if self.intermediate is not None:
            why = ""
            if self.one_pass is not None and self.held > HOLD_SHARE * budget:
                blocks = tuple(max(c) for c in self.one_pass.plan.blocks.chunks)
                why = (
                    f"; chosen because one pass, in blocks {blocks}, would hold {held}, "
                    f"more than {HOLD_SHARE} x "
                    f"{advice.name('max_mem')} (pass {advice.name('temp_store')} to place it)"
                )
            elif self.one_pass is not None:
                why = (
                    "; chosen because the cost model rates two passes cheapest "
                    f"(pass {advice.name('temp_store')} to place it)"
                )
            return self.intermediate.describe() + why
        if self.straddles:
            over = self.held > HOLD_SHARE * budget
            return (
                "none: one pass; inner chunks straddle the blocks, so each shard is gathered "
                f"from blocks read in order and held until its parts are written: {held}"
                + (
                    f", more than {HOLD_SHARE} x {advice.name('max_mem')} "
                    f"({advice.name('temp_store')} would "
                    "copy through an intermediate in two passes instead)"
                    if over
                    else ""
                )
            )
        return "none: one pass, encoded bytes only between tasks"

    def __repr__(self) -> str:
        return text_table("RechunkJob", self.summary_rows())

    def _repr_html_(self) -> str:
        return html_table("RechunkJob", self.summary_rows())

    @property
    def target(self) -> ResolvedStore:
        """Where the rechunk writes."""
        return self.write.target

    def passes(self) -> list[Pass]:
        """One pass, or two: the copy into the intermediate, then the target from the copy.

        The first saves the copy's record in the target's job folder
        (:mod:`~shardpipe.rechunking.copy_record`) before it writes the copy,
        and marks it copied at its end. The second pass is planned on the
        copy once the first wrote it, and deletes the copy and its record
        when it ends. A failed first pass deletes the copy (and its record)
        only when shardpipe chose the two passes (and so placed the copy); an
        interrupted one (``KeyboardInterrupt``) and a failed second pass keep
        both, for ``resume=True``, and so does a killed run (into an Icechunk
        session, whose record goes with the session, nothing is kept). With
        ``progress``, one bar counts the blocks copied, then the shards written.
        """
        target, stale = self.target, self.stale

        def forget_stale() -> None:
            if stale is not None:
                keep = self.intermediate.store if self.intermediate is not None else ""
                options = self.intermediate.storage_options if self.intermediate else None
                forget_copy(target, stale, keep, options)

        if self.intermediate is None:

            def one_pass(_: bool) -> list[ShardedWrite]:
                forget_stale()
                return [self.write]

            return [Pass("rechunk", one_pass)]
        assert self.origin is not None and self.replan is not None
        inter, origin, replan = self.intermediate, self.origin, self.replan
        copies: list[Source] = []
        done = self._done
        done.clear()
        bars: list[PassesBar] = []
        carried = ExitStack()
        second_began: list[float] = []
        second: list[ShardedWrite] = []  # the write of pass 2, as planned on the copy

        def close_bar() -> None:
            carried.close()
            for bar in bars:
                bar.close()
            bars.clear()

        def copy(progress: bool) -> list[ShardedWrite]:
            began = time.perf_counter()
            forget_stale()
            blocks = origin.blocks(inter.block_shape)
            bar = PassesBar(
                [blocks.npartitions, self.write.plan.n_shards], ["copy", "rechunk"], progress
            )
            bars.append(bar)
            written = None
            copied: list[tuple[int, ...]] = []
            if inter.found == "copied":  # a killed run copied it all: pass 1 is done
                written = inter.open(origin.shape, origin.dtype)
                bar.start_pass(1, 0 if written is not None else None)
            if written is None:
                save_copy_record(target, inter.identity, inter.store, inter.placed, "copying")
                resume = inter.found is not None
                written, copied = inter.write(blocks, origin.fill_value, bar=bar, resume=resume)
                save_copy_record(target, inter.identity, inter.store, inter.placed, "copied")
            copies.append(
                Source(
                    inter.store,
                    written,
                    inter.chunk_shape,
                    read_blocks=functools.partial(inter.source, written),
                )
            )
            reads = blocks_read_cost(
                origin.shape, origin.dtype.itemsize, origin.read_unit, inter.block_shape, copied
            )
            done.append(
                PassReport(
                    COPY,
                    time.perf_counter() - began,
                    reads=reads.reads,
                    nbytes_read=reads.nbytes_read,
                    nbytes_stored=written.nbytes_stored(),
                    location=inter.store,
                    blocks=len(copied),
                    blocks_kept=blocks.npartitions - len(copied),
                )
            )
            return []

        def rechunk(_: bool) -> list[ShardedWrite]:
            second_began.append(time.perf_counter())
            write = replan(copies[-1], self.block_shape)
            second.append(write)
            if bars:
                bars[-1].start_pass(2, write.plan.n_shards)
                carried.enter_context(bars[-1].carried())
            return [write]

        def end(reports: object) -> None:
            close_bar()
            inter.remove()
            delete_copy_record(target)
            seconds = time.perf_counter() - second_began[-1]
            done[0] = replace(done[0], removed=True)
            # the copy's blocks this run read: a resumed one, only those of the shards it wrote
            read = second[-1].blocks_read()
            reads = blocks_read_cost(
                origin.shape, origin.dtype.itemsize, inter.chunk_shape, self.block_shape, read
            )
            done.append(
                PassReport(
                    WRITE,
                    seconds,
                    reads=reads.reads,
                    nbytes_read=reads.nbytes_read,
                    blocks=len(read),
                )
            )

        def abandon_copy(err: BaseException) -> None:
            close_bar()
            if isinstance(err, KeyboardInterrupt) and not target.transactional:
                # stopped, not failed: what was copied serves resume=True, as after a kill
                err.add_note(_resume_note(inter, "in part", "copies the rest, then writes"))
                return
            # a copy shardpipe placed that failed is of use to nobody; nor is any copy
            # into an Icechunk session, whose record went with the session
            if inter.placed or target.transactional:
                inter.remove()
                if target.shards.get(target.key(INTERMEDIATE_RECORD)) is not None:
                    delete_copy_record(target)

        def abandon_write(err: BaseException) -> None:
            close_bar()
            if target.transactional:  # the copy's record was in the session: none to resume
                inter.remove()
                err.add_note(
                    f"shardpipe: the first pass's copy of the source at {inter.store!r} was "
                    "removed (an Icechunk target keeps no record to resume from): run the "
                    "same rechunk again"
                )
                return
            # the copy and its record stay: resume=True carries on from them
            err.add_note(_resume_note(inter, "complete", "writes"))

        return [
            Pass(COPY, copy, abandon=abandon_copy),
            Pass(WRITE, rechunk, end=end, abandon=abandon_write),
        ]

    def finish(self, reports: PassReports, seconds: float, snapshot_id: str | None) -> WriteReport:
        """The report of the write of the target, over both passes when there are two."""
        report = reports[-1][0]
        if self.intermediate is not None:
            done = tuple(self._done)
            if len(done) == 2:  # the write's stored bytes: those of the last pass
                done = (done[0], replace(done[1], nbytes_stored=report.nbytes))
            report = replace(
                report,
                seconds=seconds,
                intermediate_nbytes=done[0].nbytes_stored if done else 0,
                passes=done,
            )
        return replace(report, snapshot_id=snapshot_id)

    @shares_parameters(RUN_PARAMETERS)
    def execute(
        self, *, progress: bool = False, commit: str | None = None, rebase: bool = False
    ) -> WriteReport:
        """Run the rechunk; return what was written.

        A two-pass rechunk copies the source into the intermediate first, then
        writes the target from it, then deletes the copy; one progress bar
        counts both passes, and the report's
        :attr:`~shardpipe.WriteReport.passes` says what each did. ``commit``
        and ``rebase`` are those of :meth:`shardpipe.ShardedWrite.execute`
        (Icechunk targets).

        Parameters
        ----------
        """
        return run_job(self, progress=progress, commit=commit, rebase=rebase)

    def to_delayed(self) -> Delayed:
        """The rechunk as a Dask ``Delayed``; see :meth:`shardpipe.ShardedWrite.to_delayed`."""
        if self.intermediate is not None:
            if self.one_pass is not None:  # two passes were chosen, not asked for
                return self.one_pass.to_delayed()
            raise InvalidArgumentError(
                "compute",
                "a two-pass rechunk (temp_store) runs its passes one after the other",
                "Use compute=True",
            )
        return self.write.to_delayed()


def _resume_note(inter: Intermediate, how: str, then: str) -> str:
    """What a rechunk stopped with its copy kept says: where it is and how to go on."""
    resume, overwrite = advice.setting("resume"), advice.setting("overwrite")
    return (
        f"shardpipe: the first pass's copy of the source is {how} and kept at "
        f"{inter.store!r}: the same rechunk with {resume} {then} the target from it "
        f"(with {overwrite} it starts afresh" + (", removing the copy)" if inter.placed else ")")
    )
