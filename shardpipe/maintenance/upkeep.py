"""Looking after an existing sharded array: ``info``, ``repair`` and ``compact``.

* :func:`info` reads only shard indexes: shape, layout, codecs, shards
  present, inner chunks stored, bytes used and unused;
* :func:`repair` rolls back every shard an interrupted update left behind
  (from its undo records), removes staging leftovers, a dead job's marker
  and shards past the end of the grid (an append interrupted before it
  published the grown ``zarr.json``), then verifies the array;
* :func:`compact` rewrites shards whose unused share (left by appends and
  in-place updates) is above a threshold, copying kept chunks as they are.

Each holds the array's job marker while it changes anything. The shards
are found by listing the array's shard prefix (never by walking its grid,
which may be vast and nearly empty); keys there that name no shard of the
grid are skipped (``info`` counts them, ``verify`` reports them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from zarr.core.metadata.v3 import ArrayV3Metadata

from shardpipe.core.checks import check_bool, check_int
from shardpipe.core.shard_update import Abilities, plan_shard_update
from shardpipe.engine.update_tasks import StoredShard, read_shard, rewrite_shard
from shardpipe.errors import InvalidArgumentError
from shardpipe.formats.zarr_sharding import ZarrShardingFormat
from shardpipe.journal.array_lock import holding, release, take
from shardpipe.journal.markers import JobKeys, read_marker
from shardpipe.journal.undo import recover, undo_records
from shardpipe.legacy.hierarchy import each_array, read_draft
from shardpipe.maintenance.groups import GroupInfo, group_at, per_array
from shardpipe.maintenance.verification import VerifyReport, verify
from shardpipe.ome.group_repair import repair_group
from shardpipe.ome.stored import is_ome_image
from shardpipe.precomputed.check import PrecomputedReport, check_volume, read_info
from shardpipe.storage.resolve import ResolvedStore, resolve_store
from shardpipe.stored.listing import Listed, list_shards, over_shards
from shardpipe.stored.metadata import format_of, layout_of
from shardpipe.stored.places import check_node_present
from shardpipe.write.update_target import read_metadata


def _each_shard[T](
    target: ResolvedStore,
    metadata: Any,
    workers: int,
    func: Callable[[StoredShard], T],
    others: Callable[[Listed], None] | None = None,
    *,
    shard_format: ZarrShardingFormat | None = None,
    progress: bool = False,
    name: str = "shardpipe",
) -> Iterator[T]:
    """Apply ``func`` to every shard present (found by listing), ``workers`` at a time.

    Keys under the shard prefix that name no shard of the grid are skipped
    (given to ``others``); a shard deleted since it was listed is skipped.
    ``shard_format`` replaces the format ``metadata`` gives (a draft array's).
    ``progress`` shows a bar labelled ``name`` over the shards.
    """
    shard_format = format_of(metadata) if shard_format is None else shard_format

    def task(batch: list[Listed]) -> list[T | None]:
        results: list[T | None] = []
        for item in batch:
            assert item.coords is not None  # over_shards hands on only the grid's shards
            stored = read_shard(target.shards, shard_format, item.key, shard=item.coords)
            results.append(None if stored is None else func(stored))
        return results

    grid = layout_of(metadata).shard_grid
    for result in over_shards(
        target,
        shard_format,
        grid,
        task,
        workers=workers,
        others=others,
        progress=progress,
        name=name,
    ):
        if result is not None:
            yield result


@dataclass(frozen=True)
class ArrayInfo:
    """What :func:`info` reports about a sharded array.

    Attributes
    ----------
    shape, dtype, chunks, shards
        The array's shape, dtype, inner chunk shape and shard shape.
    codecs : list of str
        Names of the inner chunk codecs.
    index_location : str
        ``"start"`` or ``"end"``.
    n_shards : int
        Shards in the grid.
    shards_present : int
        Shard objects stored.
    chunks_stored : int
        Inner chunks stored.
    nbytes_stored : int
        Bytes of all shard objects.
    nbytes_unused : int
        Of those, bytes no index points at (left by appends and in-place
        updates; :func:`compact` reclaims them).
    job : str or None
        The job holding the array's marker, if any.
    pending_undo : int
        Shards an interrupted update left mid-change (run :func:`repair`).
    not_shards : int
        Keys under the shard prefix that name no shard of the grid (and are
        not temporary files of a write): ``verify`` reports them.
    """

    shape: tuple[int, ...]
    dtype: str
    chunks: tuple[int, ...]
    shards: tuple[int, ...]
    codecs: list[str]
    index_location: str
    n_shards: int
    shards_present: int
    chunks_stored: int
    nbytes_stored: int
    nbytes_unused: int
    job: str | None = None
    pending_undo: int = 0
    not_shards: int = 0

    @property
    def unused_ratio(self) -> float:
        """Unused share of the stored bytes."""
        return self.nbytes_unused / self.nbytes_stored if self.nbytes_stored else 0.0

    def __str__(self) -> str:
        lines = [
            f"shape: {self.shape}",
            f"dtype: {self.dtype}",
            f"inner chunks: {self.chunks}",
            f"shards: {self.shards} (index at the {self.index_location})",
            f"inner codecs: {' -> '.join(self.codecs) or 'none'}",
            f"shards present: {self.shards_present:,} of {self.n_shards:,}",
            f"inner chunks stored: {self.chunks_stored:,}",
            f"bytes stored: {self.nbytes_stored:,} ({self.nbytes_unused:,} unused, "
            f"{self.unused_ratio:.1%})",
        ]
        if self.job:
            lines.append(f"held by: {self.job}")
        if self.pending_undo:
            lines.append(f"left mid-update: {self.pending_undo} shard(s); run `shardpipe repair`")
        if self.not_shards:
            lines.append(
                f"not shards of the grid: {self.not_shards:,} key(s) under the shard prefix "
                "(skipped; `shardpipe verify` names them)"
            )
        return "\n".join(lines)


def info(
    store: Any,
    path: str | None = None,
    *,
    storage_options: dict[str, Any] | None = None,
    workers: int = 8,
    progress: bool = False,
) -> ArrayInfo | GroupInfo | PrecomputedReport:
    """Describe the sharded array at ``path`` from its metadata and shard indexes.

    A Neuroglancer precomputed volume (an ``info`` file) is described scale
    by scale (:func:`shardpipe.precomputed.check.check_volume`, chunks not decoded).

    Reads each shard's index only (no inner chunk is read or decoded). For a
    group, returns a :class:`~shardpipe.maintenance.groups.GroupInfo` with the
    :class:`ArrayInfo` of each sharded array in it. ``progress`` shows a bar
    over the shards of each array (``tqdm.auto``).
    """
    workers = check_int("workers", workers, example=8)
    progress = check_bool("progress", progress)
    target = resolve_store(store, path, storage_options)
    if (precomputed := read_info(target)) is not None:
        return check_volume(target, precomputed, decode=False)
    if (draft := read_draft(target, strict=False)) is not None:
        arrays = each_array(
            target,
            draft,
            lambda folder, a: _array_info(
                folder, workers, progress, metadata=a.metadata, shard_format=a.shard_format
            ),
        )
        return GroupInfo(arrays, dict(draft.unsupported))
    check_node_present(target, "path" if path else "store")
    group = group_at(target)
    if group is not None:
        arrays, skipped = per_array(target, group, lambda t: _array_info(t, workers, progress))
        return GroupInfo(arrays, skipped)
    return _array_info(target, workers, progress)


def _array_info(
    target: ResolvedStore,
    workers: int,
    progress: bool = False,
    *,
    metadata: ArrayV3Metadata | None = None,
    shard_format: ZarrShardingFormat | None = None,
) -> ArrayInfo:
    """Describe the array at ``target``; ``metadata`` and ``shard_format`` are a draft array's."""
    if metadata is None:
        metadata, _ = read_metadata(target, "store")
    layout = layout_of(metadata)
    shard_format = format_of(metadata) if shard_format is None else shard_format
    present = chunks = nbytes = unused = strays = 0

    def stray(listed: Listed) -> None:
        nonlocal strays
        strays += not listed.temporary

    for size, stored, free in _each_shard(
        target,
        metadata,
        workers,
        lambda s: (s.layout.size, len(s.stored), s.layout.unused_nbytes()),
        stray,
        shard_format=shard_format,
        progress=progress,
        name=f"info {target.path}" if target.path else "info",
    ):
        present, chunks, nbytes, unused = present + 1, chunks + stored, nbytes + size, unused + free
    sharding = metadata.codecs[0]
    codecs = [str(c.to_dict()["name"]) for c in getattr(sharding, "codecs", ())]
    jobs = JobKeys(target.key(""))
    marker = read_marker(target.shards, jobs)
    return ArrayInfo(
        shape=tuple(metadata.shape),
        dtype=str(metadata.dtype.to_native_dtype()),
        chunks=layout.chunk_shape,
        shards=layout.shard_shape,
        codecs=codecs,
        index_location=shard_format.index_location,
        n_shards=layout.n_shards,
        shards_present=present,
        chunks_stored=chunks,
        nbytes_stored=nbytes,
        nbytes_unused=unused,
        job=None if marker is None else marker.describe(),
        pending_undo=sum(1 for _ in undo_records(target.shards, jobs)),
        not_shards=strays,
    )


@dataclass
class RepairReport:
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
    verify : VerifyReport
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

    def __str__(self) -> str:
        lines = [f"rolled back: {self.rolled_back} shard(s) left mid-update"]
        if self.removed_marker:
            lines.append(f"removed the marker of {self.removed_marker}")
        if self.removed_past_grid:
            lines.append(
                f"removed {self.removed_past_grid} shard(s) past the end of the grid "
                "(an interrupted append's)"
            )
        lines += self.notes
        return "\n".join([*lines, str(self.verify)])


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
    store, path, storage_options
        Where the array is, as for :func:`~shardpipe.to_sharded_zarr`.
    force : bool
        Take over from a job whose marker is present although shardpipe
        cannot tell that it stopped (it ran on another machine). Never use
        it while that job may still run.
    progress : bool
        Show a bar over the shards of the final check (``tqdm.auto``).

    Raises
    ------
    shardpipe.errors.JobConflictError
        If a job that may still run holds the array (and not ``force``).
    """
    force = check_bool("force", force)
    progress = check_bool("progress", progress)
    target = resolve_store(store, path, storage_options)
    if is_ome_image(target):  # an OME-Zarr image group: each level array, then the group
        return _repair_ome(target, force, progress)
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


def _repair_ome(target: ResolvedStore, force: bool, progress: bool) -> RepairReport:
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
    assert isinstance(checked, VerifyReport)
    report.verify = checked
    return report


def _remove_past_grid(target: ResolvedStore) -> int:
    """Delete the shard objects of ``target`` whose position lies past the end of its grid."""
    metadata, _ = read_metadata(target, "store")
    shard_format, grid = format_of(metadata), layout_of(metadata).shard_grid
    base = target.key("")
    removed = 0
    for listed in list_shards(target, shard_format, grid):
        relative = listed.key[len(base) :]
        if listed.coords is None and shard_format.coords(relative) is not None:
            target.shards.delete(listed.key)
            removed += 1
    return removed


@dataclass
class CompactReport:
    """What :func:`compact` did.

    Attributes
    ----------
    shards_checked : int
        Shards present.
    shards_rewritten : int
        Shards rewritten compactly.
    nbytes_before, nbytes_after : int
        Bytes of the rewritten shards before and after.
    """

    shards_checked: int = 0
    shards_rewritten: int = 0
    nbytes_before: int = 0
    nbytes_after: int = 0

    def __str__(self) -> str:
        saved = self.nbytes_before - self.nbytes_after
        return (
            f"{self.shards_rewritten} of {self.shards_checked} shard(s) rewritten, "
            f"{self.nbytes_before:,} -> {self.nbytes_after:,} bytes ({saved:,} reclaimed)"
        )


def compact(
    store: Any,
    path: str | None = None,
    *,
    threshold: float = 0.1,
    storage_options: dict[str, Any] | None = None,
    workers: int = 4,
    progress: bool = False,
) -> CompactReport:
    """Rewrite every shard whose unused share of bytes is above ``threshold``.

    Kept inner chunks are copied as they are (never decoded). Each shard is
    replaced atomically and only if it did not change since its index was
    read; every worker holds one whole shard.

    Parameters
    ----------
    store, path, storage_options
        Where the array is, as for :func:`~shardpipe.to_sharded_zarr`.
    threshold : float
        In ``[0, 1)``: shards with a larger unused share are rewritten
        (``0`` rewrites every shard with any unused byte).
    workers : int
        Shards rewritten concurrently.
    progress : bool
        Show a bar over the shards checked (``tqdm.auto``).
    """
    if not isinstance(threshold, (int, float)) or not 0 <= threshold < 1:
        raise InvalidArgumentError(
            "threshold", f"{threshold!r} is not in [0, 1)", "Use e.g. threshold=0.1"
        )
    workers = check_int("workers", workers, example=4)
    progress = check_bool("progress", progress)
    target = resolve_store(store, path, storage_options)
    check_node_present(target, "path" if path else "store")
    metadata, _ = read_metadata(target, "store")
    shard_format = format_of(metadata)
    report = CompactReport()

    def one(stored: StoredShard) -> tuple[int, int]:
        size, unused = stored.layout.size, stored.layout.unused_nbytes()
        if not unused or unused <= threshold * size:
            return size, -1
        plan = plan_shard_update(stored.layout, {}, "rewrite", Abilities())
        return size, rewrite_shard(shard_format, stored, plan, {})

    with holding(target.shards, JobKeys(target.key("")), "compact"):
        shards = _each_shard(target, metadata, workers, one, progress=progress, name="compact")
        for before, after in shards:
            report.shards_checked += 1
            if after >= 0:
                report.shards_rewritten += 1
                report.nbytes_before += before
                report.nbytes_after += after
    return report


__all__ = [
    "ArrayInfo",
    "CompactReport",
    "RepairReport",
    "compact",
    "info",
    "repair",
]
