"""A batch of region writes as a job of the runner: ``RegionBatchJob``.

:func:`~shardpipe.write.batch.write_regions` and
:class:`~shardpipe.write.batch.RegionBatch` check their pairs and group them by
shard; the job they make holds that, shows it as a plan and runs as every
other job does (:func:`~shardpipe.write.runner.run_job`): one pass that
writes by itself, in the calling thread, without a Dask graph.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from shardpipe.core.display import html_table, text_table
from shardpipe.core.grid import Box, Coords
from shardpipe.core.region_batch import ChunkFill
from shardpipe.engine.reports import WriteReport
from shardpipe.storage.resolve import ResolvedStore
from shardpipe.write.creation import check_no_other_job
from shardpipe.write.in_thread import run_batch
from shardpipe.write.runner import Pass, PassReports, run_job
from shardpipe.write.update_target import ExistingArray

__all__ = ["RegionBatchJob"]


@dataclass(frozen=True, repr=False)
class RegionBatchJob:
    """Checked pairs ``(region, data)`` of one existing array, grouped by the shard they touch.

    Attributes
    ----------
    target : ResolvedStore
        The array.
    existing : ExistingArray
        Its metadata and ``zarr.json`` version as read when the pairs were
        checked, and the write strategy.
    groups : dict of shard coordinates to list of ChunkFill
        The touched inner chunks of every shard touched.
    boxes, data : sequence
        The pairs' boxes (array coordinates) and values, in order.
    rewrite_fits, encoders, write_empty_chunks
        How shards are written (see :func:`~shardpipe.write.in_thread.run_batch`).
    """

    target: ResolvedStore
    existing: ExistingArray
    groups: dict[Coords, list[ChunkFill]]
    boxes: Sequence[Box]
    data: Sequence[np.ndarray]
    rewrite_fits: bool
    encoders: int
    write_empty_chunks: bool

    def summary_rows(self) -> list[tuple[str, str]]:
        """The plan as ``(label, value)`` rows (what ``repr`` and the HTML show)."""
        n_chunks = sum(len(fills) for fills in self.groups.values())
        return [
            ("array", str(self.target.zarr_store)),
            ("regions", f"{len(self.boxes):,} (later ones win where they overlap)"),
            ("shards", f"{len(self.groups):,} touched, each changed once by one writer"),
            ("inner chunks", f"{n_chunks:,} touched"),
            ("write_strategy", repr(self.existing.strategy)),
        ]

    def __repr__(self) -> str:
        return text_table("RegionBatchJob", self.summary_rows())

    def _repr_html_(self) -> str:
        return html_table("RegionBatchJob", self.summary_rows())

    def passes(self) -> list[Pass]:
        """One pass, writing by itself in the calling thread (no Dask graph)."""
        return [Pass("write the regions", write=self._write)]

    def _write(self, progress: bool) -> list[WriteReport]:
        check_no_other_job(self.target, None, "write a batch of regions into the array")
        report = run_batch(
            self.target,
            self.existing,
            self.groups,
            self.boxes,
            self.data,
            rewrite_fits=self.rewrite_fits,
            encoders=self.encoders,
            write_empty_chunks=self.write_empty_chunks,
        )
        return [report]

    def finish(self, reports: PassReports, seconds: float, snapshot_id: str | None) -> WriteReport:
        """The batch's report, with the time taken."""
        return replace(sum(reports[0], WriteReport()), seconds=seconds)

    def execute(self) -> WriteReport:
        """Write the regions (see :func:`~shardpipe.write.batch.write_regions`)."""
        report: WriteReport = run_job(self)
        return report
