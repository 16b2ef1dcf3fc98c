"""What an OME-Zarr write did: each level array's report."""

from __future__ import annotations

from dataclasses import dataclass, field

from shardpipe.engine.reports import WriteReport

__all__ = ["OmeZarrReport"]


@dataclass(frozen=True)
class OmeZarrReport:
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
            f"{len(self.levels)} arrays, {self.shards:,} shards, {self.nbytes:,} bytes in "
            f"{self.seconds:.2f} s"
        )
