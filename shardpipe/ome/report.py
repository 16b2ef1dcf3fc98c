"""What an OME-Zarr write did: each level array's report."""

from __future__ import annotations

from dataclasses import dataclass, field

from shardpipe.core.display import ShowsSummary, Summary, format_count, format_nbytes
from shardpipe.engine.reports import WriteReport

__all__ = ["OmeZarrReport"]


@dataclass(frozen=True, repr=False)
class OmeZarrReport(ShowsSummary):
    """What an OME-Zarr write did.

    Parameters
    ----------
    levels : dict of str to WriteReport
        The report of each level array, by its path in the image group.
    seconds : float
        Wall time of the run.
    snapshot_id : str or None
        The Icechunk snapshot committed, with ``commit``.
    """

    levels: dict[str, WriteReport] = field(default_factory=dict)
    seconds: float = 0.0
    snapshot_id: str | None = None

    @property
    def shards(self) -> int:
        """Shards written (or left out as empty) over every level."""
        return sum(r.shards for r in self.levels.values())

    @property
    def nbytes(self) -> int:
        """Bytes written to shard objects over every level."""
        return sum(r.nbytes for r in self.levels.values())

    def __str__(self) -> str:
        return (
            f"{len(self.levels)} arrays, {format_count(self.shards)} shards, "
            f"{format_nbytes(self.nbytes)} in {self.seconds:.2f} s"
        )

    def _summary(self) -> Summary:
        rows = [
            ("arrays", format_count(len(self.levels))),
            ("shards", format_count(self.shards)),
            ("bytes", format_nbytes(self.nbytes)),
            ("seconds", f"{self.seconds:.2f}"),
        ]
        rows += [
            (f"  {path}", f"{format_count(r.shards)} shards, {format_nbytes(r.nbytes)}")
            for path, r in list(self.levels.items())[:12]
        ]
        if len(self.levels) > 12:
            rows.append(("  ...", f"{len(self.levels) - 12} more arrays in .levels"))
        if self.snapshot_id:
            rows.append(("snapshot", self.snapshot_id))
        return Summary("OmeZarrReport", None, rows)
