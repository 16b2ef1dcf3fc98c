"""``info``: what an array holds, from its metadata and shard indexes alone.

:func:`info` reads each shard's index (no inner chunk is read or decoded)
and reports the shape, layout, codecs, shards present, inner chunks stored,
bytes used and unused (:class:`ArrayInfo`); for a group or a draft
hierarchy, one :class:`ArrayInfo` per array (:class:`GroupInfo`); for a
Neuroglancer precomputed volume, its scales.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from shardpipe.core.checks import check_bool, check_int
from shardpipe.core.display import ShowsSummary, Summary, format_count, format_nbytes
from shardpipe.engine.shard_sweep import over_stored_shards
from shardpipe.errors import ShardFormatError
from shardpipe.formats.zarr_sharding import ZarrShardingFormat
from shardpipe.internals.zarr_core import ArrayV3Metadata
from shardpipe.journal.markers import JobKeys, read_marker
from shardpipe.journal.undo import undo_records
from shardpipe.journal.unfinished import UnfinishedJob, unfinished_lines
from shardpipe.maintenance.targets import over_target
from shardpipe.maintenance.unfinished import only_records, unfinished_jobs
from shardpipe.precomputed.check import PrecomputedReport, check_volume
from shardpipe.storage.remembered import remembering
from shardpipe.storage.resolve import ResolvedStore, resolve_store
from shardpipe.stored.listing import Listed
from shardpipe.stored.metadata import format_of, layout_of, read_metadata
from shardpipe.stored.places import check_not_a_file
from shardpipe.write.options import STORED_PARAMETERS
from shardpipe.write.parameters import shares_parameters


@dataclass(frozen=True, repr=False)
class ArrayInfo(ShowsSummary):
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
        updates; :func:`~shardpipe.maintenance.compaction.compact` reclaims them).
    job : str or None
        The job holding the array's marker, if any.
    pending_undo : int
        Shards an interrupted update left mid-change (run
        :func:`~shardpipe.maintenance.repairs.repair`).
    not_shards : int
        Keys under the shard prefix that name no shard of the grid (and are
        not temporary files of a write): ``verify`` reports them.
    problems : list of (str, str)
        ``(key, problem)`` of each shard whose index cannot be read (it
        does not follow the shard format: a checksum mismatch, an object
        too short, entries outside it), in grid order. Such a shard counts
        in ``shards_present`` and ``nbytes_stored``, not in ``chunks_stored``
        nor ``nbytes_unused``; ``verify`` checks it whole.
    interrupted : list of UnfinishedJob
        The interrupted jobs whose records are beside the array
        (:func:`~shardpipe.maintenance.unfinished.unfinished_jobs`), printed
        as ``verify`` prints them.
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
    problems: list[tuple[str, str]] = field(default_factory=list)
    interrupted: list[UnfinishedJob] = field(default_factory=list)

    @property
    def unused_ratio(self) -> float:
        """Unused share of the stored bytes."""
        return self.nbytes_unused / self.nbytes_stored if self.nbytes_stored else 0.0

    def _warnings(self) -> list[str]:
        warnings = []
        if self.pending_undo:
            warnings.append(
                f"{format_count(self.pending_undo)} shard(s) left mid-update: run `repair`"
            )
        if self.not_shards:
            warnings.append(
                f"{format_count(self.not_shards)} key(s) under the shard prefix name no shard "
                "(`verify` names them)"
            )
        if self.problems:
            warnings.append(
                f"{format_count(len(self.problems))} shard(s) whose index cannot be read "
                f"(.problems; `verify` checks them), the first {self.problems[0][0]}: "
                f"{self.problems[0][1]}"
            )
        warnings += [f"{job.key}: {job.describe()}" for job in self.interrupted]
        return warnings

    def _summary(self) -> Summary:
        rows = [
            ("shape", str(self.shape)),
            ("dtype", self.dtype),
            ("inner chunks", str(self.chunks)),
            ("shards", f"{self.shards} (index at the {self.index_location})"),
            ("inner codecs", " -> ".join(self.codecs) or "none"),
            (
                "shards present",
                f"{format_count(self.shards_present)} of {format_count(self.n_shards)}",
            ),
            ("inner chunks stored", format_count(self.chunks_stored)),
            ("bytes stored", self._bytes_text()),
        ]
        if self.job:
            rows.append(("held by", self.job))
        warnings = self._warnings()
        return Summary("ArrayInfo", None, rows, warnings, where="__str__()")

    def _bytes_text(self) -> str:
        return (
            f"{format_nbytes(self.nbytes_stored)}, {format_nbytes(self.nbytes_unused)} unused "
            f"({self.unused_ratio:.1%})"
        )

    def __str__(self) -> str:
        lines = [
            f"shape: {self.shape}",
            f"dtype: {self.dtype}",
            f"inner chunks: {self.chunks}",
            f"shards: {self.shards} (index at the {self.index_location})",
            f"inner codecs: {' -> '.join(self.codecs) or 'none'}",
            f"shards present: {self.shards_present:,} of {self.n_shards:,}",
            f"inner chunks stored: {self.chunks_stored:,}",
            f"bytes stored: {self._bytes_text()}",
        ]
        if self.job:
            lines.append(f"held by: {self.job}")
        if self.pending_undo:
            lines.append(f"left mid-update: {self.pending_undo:,} shard(s); run `shardpipe repair`")
        if self.not_shards:
            lines.append(
                f"not shards of the grid: {self.not_shards:,} key(s) under the shard prefix "
                "(skipped; `shardpipe verify` names them)"
            )
        lines += [f"index not readable: {key}: {problem}" for key, problem in self.problems]
        lines += unfinished_lines(self.interrupted)
        return "\n".join(lines)


@dataclass(frozen=True, repr=False)
class GroupInfo(ShowsSummary):
    """What :func:`shardpipe.info` reports about a group: one :class:`ArrayInfo` per array.

    Attributes
    ----------
    arrays : dict
        Per sharded array (by store path), its :class:`~shardpipe.ArrayInfo`.
    skipped : dict
        Arrays that are not sharded Zarr v3 arrays, with the reason.
    interrupted : list of UnfinishedJob
        The interrupted jobs recorded at the group itself (an OME-Zarr
        image's write, a migration) and in its arrays.
    """

    arrays: dict[str, ArrayInfo] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    interrupted: list[UnfinishedJob] = field(default_factory=list)

    @property
    def nbytes_stored(self) -> int:
        """Bytes of all shard objects of all arrays."""
        return sum(a.nbytes_stored for a in self.arrays.values())

    def _summary(self) -> Summary:
        unused = sum(a.nbytes_unused for a in self.arrays.values())
        rows = [
            ("sharded arrays", format_count(len(self.arrays))),
            ("skipped", format_count(len(self.skipped))),
            ("shards present", format_count(sum(a.shards_present for a in self.arrays.values()))),
            (
                "bytes stored",
                f"{format_nbytes(self.nbytes_stored)}, {format_nbytes(unused)} unused",
            ),
        ]
        rows += [
            (path, f"{a.shape} {a.dtype}, {format_nbytes(a.nbytes_stored)}")
            for path, a in self.arrays.items()
        ]
        warnings = [f"{path}: {w}" for path, a in self.arrays.items() for w in a._warnings()]
        nested = {job for a in self.arrays.values() for job in a.interrupted}
        warnings += [f"{j.key}: {j.describe()}" for j in self.interrupted if j not in nested]
        return Summary("GroupInfo", None, rows, warnings, where="arrays")

    def __str__(self) -> str:
        lines = [
            f"{path}: shape {a.shape}, {a.dtype}, shards {a.shards}, inner chunks {a.chunks}, "
            f"{a.shards_present:,}/{a.n_shards:,} shards, {format_nbytes(a.nbytes_stored)}"
            + (f", {a.unused_ratio:.1%} unused" if a.nbytes_unused else "")
            + (f", {len(a.problems):,} with an index not readable" if a.problems else "")
            for path, a in self.arrays.items()
        ]
        lines += [f"{path}: skipped ({reason})" for path, reason in self.skipped.items()]
        unused = sum(a.nbytes_unused for a in self.arrays.values())
        lines.append(
            f"total: {len(self.arrays)} sharded array(s), "
            f"{sum(a.shards_present for a in self.arrays.values()):,} shards, "
            f"{format_nbytes(self.nbytes_stored)}, {format_nbytes(unused)} unused"
            + (f"; {len(self.skipped)} skipped" if self.skipped else "")
        )
        lines += unfinished_lines(self.interrupted)
        return "\n".join(lines)


@shares_parameters(STORED_PARAMETERS)
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
    group, returns a :class:`~shardpipe.maintenance.array_info.GroupInfo` with the
    :class:`ArrayInfo` of each sharded array in it. ``progress`` shows a bar
    over the shards of each array (``tqdm.auto``).

    Every report lists the interrupted jobs recorded at the location and in
    its arrays (``interrupted``, :mod:`shardpipe.maintenance.unfinished`). A
    location where an interrupted job left only its records (killed before
    it wrote any metadata) is described by a :class:`GroupInfo` with no
    arrays and those jobs.

    Parameters
    ----------
    """
    workers = check_int("workers", workers, example=8)
    progress = check_bool("progress", progress)
    target = remembering(resolve_store(store, path, storage_options))  # documents read once
    check_not_a_file(target, "path" if path else "store")
    if jobs := only_records(target):  # what an interrupted job left, and nothing else yet
        return GroupInfo(interrupted=jobs)
    described = over_target(
        target,
        "path" if path else "store",
        volume=lambda volume, found: check_volume(volume, found, decode=False),
        array=lambda at: describe_array(
            at.target, workers, progress, metadata=at.metadata, shard_format=at.shard_format
        ),
        arrays=GroupInfo,
    )
    if isinstance(described, GroupInfo):
        nested = [job for a in described.arrays.values() for job in a.interrupted]
        return replace(described, interrupted=[*unfinished_jobs(target), *nested])
    return described


def describe_array(
    target: ResolvedStore,
    workers: int,
    progress: bool = False,
    *,
    metadata: ArrayV3Metadata | None = None,
    shard_format: ZarrShardingFormat | None = None,
) -> ArrayInfo:
    """Describe the array at ``target``; ``metadata`` and ``shard_format`` are a draft array's."""
    if metadata is None:
        metadata, _ = read_metadata(target, "store", writing=False)
    layout = layout_of(metadata)
    shard_format = format_of(metadata) if shard_format is None else shard_format
    present = chunks = nbytes = unused = strays = 0
    problems: list[tuple[tuple[int, ...], str, str]] = []

    def stray(listed: Listed) -> None:
        nonlocal strays
        strays += not listed.temporary

    def unreadable(listed: Listed, err: ShardFormatError) -> _Described:
        """An index that does not follow the format: the shard's size, and the problem."""
        problem = str(err).removeprefix(f"shard {listed.key!r}: ")  # the key is named apart
        return _Described(target.shards.size(listed.key) or 0, 0, 0, (listed, problem))

    for found in over_stored_shards(
        target,
        metadata,
        workers,
        lambda s: _Described(s.layout.size, len(s.stored), s.layout.unused_nbytes()),
        stray,
        shard_format=shard_format,
        progress=progress,
        name=f"info {target.path}" if target.path else "info",
        unreadable=unreadable,
    ):
        present, chunks = present + 1, chunks + found.chunks
        nbytes, unused = nbytes + found.nbytes, unused + found.unused
        if found.problem is not None:
            listed, problem = found.problem
            problems.append((listed.coords or (), listed.key, problem))
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
        problems=[(key, problem) for _, key, problem in sorted(problems)],
        interrupted=unfinished_jobs(target),
    )


class _Described(NamedTuple):
    """What ``info`` adds up of one shard: its bytes, chunks, unused bytes, or its problem."""

    nbytes: int
    chunks: int
    unused: int
    problem: tuple[Listed, str] | None = None
