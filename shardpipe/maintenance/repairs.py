"""``repair``: undo what interrupted writes left, then check the array.

The marker of a job that no longer runs is taken over first (in one atomic
step, :mod:`shardpipe.journal.array_lock`); holding the array, every shard
with an undo record is restored to its state before the interrupted update,
staging data, open uploads and temporary files of dead processes go, and
shard objects past the end of the grid (an append interrupted before it
published the grown ``zarr.json``) are removed. Then the array is verified.

An OME-Zarr image group is repaired as a whole: each level array as above,
then the update the group records is settled (:mod:`shardpipe.ome.group_repair`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shardpipe.core.checks import check_bool
from shardpipe.core.display import ShowsSummary, Summary, format_count
from shardpipe.journal.array_lock import release, take
from shardpipe.journal.markers import JobKeys
from shardpipe.journal.undo import recover
from shardpipe.maintenance.targets import is_image_group
from shardpipe.maintenance.verification import VerifyReport, verify
from shardpipe.ome.group_repair import repair_group
from shardpipe.storage.resolve import ResolvedStore, resolve_store
from shardpipe.stored.listing import list_shards
from shardpipe.stored.metadata import format_of, layout_of, read_metadata
from shardpipe.stored.places import check_node_present, check_not_a_file
from shardpipe.write.options import STORED_PARAMETERS
from shardpipe.write.parameters import shares_parameters
from shardpipe.write.resume import forget_finished


@dataclass(repr=False)
class RepairReport(ShowsSummary):
    """What :func:`repair` did.

    Attributes
    ----------
    rolled_back : int
        Shards restored from undo records (each to its state before the
        interrupted update).
    removed_marker : str or None
        The dead job whose marker was removed.
    removed_past_grid : int
        Shard objects removed that lay past the end of the array's grid:
        written by an append interrupted before the grown ``zarr.json`` was
        published, read by nothing until the array grows, and then stale.
    verify : shardpipe.VerifyReport
        The check of the whole array afterwards.
    notes : list of str
        For an OME-Zarr image group: how its recorded update was settled
        (:mod:`shardpipe.ome.group_repair`).
    """

    rolled_back: int = 0
    removed_marker: str | None = None
    removed_past_grid: int = 0
    verify: VerifyReport = field(default_factory=lambda: VerifyReport([]))
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether the array verifies clean after the repair."""
        return self.verify.ok

    def _summary(self) -> Summary:
        checked = self.verify._summary()
        rows = [
            ("rolled back", f"{format_count(self.rolled_back)} shard(s) left mid-update"),
            ("past the grid", f"{format_count(self.removed_past_grid)} shard(s) removed"),
        ]
        if self.removed_marker:
            rows.append(("removed marker", self.removed_marker))
        rows += [(f"after: {label}", value) for label, value in checked.rows]
        return Summary(
            "RepairReport",
            "OK" if self.ok else "PROBLEMS LEFT",
            rows,
            checked.problems,
            checked.n_problems,
            where="verify.problems",
        )

    def __str__(self) -> str:
        lines = [f"rolled back: {self.rolled_back:,} shard(s) left mid-update"]
        if self.removed_marker:
            lines.append(f"removed the marker of {self.removed_marker}")
        if self.removed_past_grid:
            lines.append(
                f"removed {self.removed_past_grid:,} shard(s) past the end of the grid "
                "(an interrupted append's)"
            )
        lines += self.notes
        return "\n".join([*lines, str(self.verify)])


@shares_parameters(STORED_PARAMETERS)
def repair(
    store: Any,
    path: str | None = None,
    *,
    storage_options: dict[str, Any] | None = None,
    force: bool = False,
    progress: bool = False,
) -> RepairReport:
    """Undo what interrupted writes left, so that every inner chunk holds its old or new content.

    The marker of a job that no longer runs is taken over first (in one
    atomic step, see :mod:`shardpipe.journal.array_lock`); then, holding the array,
    every shard with an undo record (an in-place update or append that did
    not finish) is restored to its state before that update, and staging
    files, open uploads and temporary files of processes that no longer run
    are removed. Then the array is verified.

    Parameters
    ----------
    force : bool
        Take over from a job whose marker is present although shardpipe
        cannot tell that it stopped (it ran on another machine). Never use
        it while that job may still run.

    Raises
    ------
    shardpipe.errors.JobConflictError
        If a job that may still run holds the array (and not ``force``).
    """
    force = check_bool("force", force)
    progress = check_bool("progress", progress)
    target = resolve_store(store, path, storage_options)
    check_not_a_file(target, "path" if path else "store")
    if is_image_group(target):  # an OME-Zarr image group: each level array, then the group
        return _repair_image(target, force, progress)
    check_node_present(target, "path" if path else "store", records=True)
    shards, keys = target.shards, JobKeys(target.key(""))
    report = RepairReport()
    taken = take(shards, keys, "repair", force=force)  # a stale marker is taken over first
    try:
        report.rolled_back += taken.rolled_back
        if taken.replaced is not None:
            report.removed_marker = taken.replaced.describe()
        report.rolled_back += len(recover(shards, keys, taken.marker))
        report.removed_past_grid = _remove_past_grid(target)
    finally:
        release(shards, keys, taken.marker)
    checked = verify(target, progress=progress)
    assert isinstance(checked, VerifyReport)  # a zarr array: its metadata was read above
    report.verify = checked
    return report


def _repair_image(target: ResolvedStore, force: bool, progress: bool) -> RepairReport:
    """Repair every level array of an OME-Zarr image group and settle its record."""
    done = repair_group(target, lambda array: repair(array, force=force))
    arrays = done.arrays.values()
    report = RepairReport(
        rolled_back=sum(r.rolled_back for r in arrays),
        removed_marker="; ".join(r.removed_marker for r in arrays if r.removed_marker) or None,
        removed_past_grid=sum(r.removed_past_grid for r in arrays),
        notes=done.notes,
    )
    checked = verify(target, progress=progress)
    assert isinstance(checked, VerifyReport)  # a group of zarr arrays
    report.verify = checked
    return report


def _remove_past_grid(target: ResolvedStore) -> int:
    """Delete the shard objects of ``target`` whose position lies past the end of its grid,
    and, when there are any, the records of finished update shards (first)."""
    metadata, _ = read_metadata(target, "store", writing=False)
    shard_format, grid = format_of(metadata), layout_of(metadata).shard_grid
    base = target.key("")
    past = [
        listed.key
        for listed in list_shards(target, shard_format, grid)
        if listed.coords is None and shard_format.coords(listed.key[len(base) :]) is not None
    ]
    if past:
        # the append that wrote them recorded them finished: its resume would skip them, and
        # they would read as fill value. Without its records it writes every shard again
        # (redoing a shard gives the same shard: records save time, never correctness)
        forget_finished(target)
    target.shards.delete_many(past)
    return len(past)
