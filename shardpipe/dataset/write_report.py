"""What ``ds.shard.to_zarr`` returns: a :class:`~shardpipe.WriteReport` per sharded variable.

A ``dict`` (variable name to report), as before, that shows itself in short:
the totals first, then a line per variable (:mod:`shardpipe.core.display`),
instead of every report's own lines in a dict's repr.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import replace

from shardpipe.core.display import ShowsSummary, Summary, format_count, format_nbytes
from shardpipe.engine.reports import WriteReport, add_reports


class DatasetWriteReport(ShowsSummary, dict[Hashable, WriteReport]):
    """Per sharded variable, the :class:`~shardpipe.WriteReport` of its write.

    A ``dict``; :attr:`total` adds the reports up.
    """

    @property
    def total(self) -> WriteReport:
        """Every variable's report added up."""
        return add_reports(*self.values())

    def _summary(self) -> Summary:
        total = self.total
        rows = [
            ("sharded variables", format_count(len(self))),
            ("shards written", format_count(total.shards_written)),
            ("inner chunks stored", format_count(total.chunks_stored)),
            ("bytes", format_nbytes(total.nbytes)),
        ]
        snapshots = {r.snapshot_id for r in self.values() if r.snapshot_id}
        if snapshots:
            rows.append(("snapshot", ", ".join(sorted(snapshots))))
        rows += [
            (str(name), f"{format_count(r.shards_written)} shard(s), {format_nbytes(r.nbytes)}")
            for name, r in self.items()
        ]
        return Summary("DatasetWriteReport", None, rows)

    def __str__(self) -> str:
        """A line per variable, then, for several, their total with the write's time.

        The variables are written together, so each report's ``seconds`` is
        the whole write's: a variable's line leaves the time and rate out,
        which only the total can state.
        """
        if len(self) <= 1:  # one variable's line says it all (none: nothing to say)
            return "\n".join(f"{name}: {report}" for name, report in self.items())
        lines = [f"{name}: {replace(report, seconds=0.0)}" for name, report in self.items()]
        return "\n".join([*lines, f"all {len(self)} variables: {self.total}"])
