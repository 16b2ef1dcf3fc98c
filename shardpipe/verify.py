"""``verify``: check every shard of a sharded Zarr v3 array.

For each shard object: the index has the right size and its CRC32C
matches; every stored inner chunk lies inside the object and outside the
index; no two chunks overlap; an entry is either fully empty or fully set;
and every stored chunk decodes to an inner chunk of the right shape.

A chunk that fails is reported by its coordinates in the array's grid of
inner chunks, its slot in the shard's index and the shard's key, with the
cause in words (:class:`ChunkFailure`): a CRC32C mismatch, a zstd frame whose
declared content size is not the chunk's (read from the frame header, never
allocated), or the codec's own error. Where the inner chunks carry no
checksum (arrays written with ``chunk_checksums=False`` or by other
writers), the report says that bit flips inside compressed chunks cannot all
be detected: many decode without error to wrong values.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from zarr.core.metadata.v3 import ArrayV3Metadata

from shardpipe.checks import check_bool, check_int
from shardpipe.completeness import unfinished_work
from shardpipe.core.grid import Coords, ShardLayout
from shardpipe.encoding import ChunkCodec, ChunkDecodeError, describe_error
from shardpipe.errors import ShardFormatError
from shardpipe.formats.base import EMPTY, ShardFormat, ShardIndex
from shardpipe.groups import group_at, per_array
from shardpipe.journal import JobKeys, undo_records
from shardpipe.metadata import format_of, layout_of, open_array_metadata
from shardpipe.storage.base import ShardStore
from shardpipe.storage.resolve import ResolvedStore, resolve_store
from shardpipe.store_checks import check_node_present

WHOLE_READ_LIMIT = 256 << 20
"""Shards up to this size are read in one request; larger ones by ranges."""


@dataclass(frozen=True)
class ChunkFailure:
    """An inner chunk whose stored bytes are not a valid encoding of it.

    Attributes
    ----------
    key : str
        Store key of the shard holding it.
    chunk : tuple of int
        Its coordinates in the array's grid of inner chunks.
    slot : int
        Its slot in the shard's index (C order over the shard's chunks).
    cause : str
        What is wrong, in words.
    """

    key: str
    chunk: Coords
    slot: int
    cause: str

    def __str__(self) -> str:
        return f"inner chunk {self.chunk} (slot {self.slot}): {self.cause}"


@dataclass
class ShardCheck:
    """The outcome of checking one shard object.

    ``chunk_failures`` lists the inner chunks that fail to decode; each is
    also one of ``problems``, as text.
    """

    key: str
    present: bool = False
    nbytes: int = 0
    chunks_stored: int = 0
    unused_bytes: int = 0
    problems: list[str] = field(default_factory=list)
    chunk_failures: list[ChunkFailure] = field(default_factory=list)


@dataclass
class VerifyReport:
    """The outcome of :func:`verify`.

    Attributes
    ----------
    shards : list of ShardCheck
        One entry per shard of the grid (of every array, for a group).
    arrays : dict
        For a group: the report of each sharded array, by store path.
    skipped : dict
        For a group: arrays that are not sharded Zarr v3 arrays, with the reason.
    notes : list of str
        What the checks could not establish, which is not a problem found:
        that the inner chunks carry no checksum, so that bit flips inside
        compressed chunks cannot all be detected; traces of an unfinished
        job (without ``complete``).
    job_problems : list of (str, str)
        With ``complete``: ``(key, problem)`` for each trace of an unfinished
        job (:mod:`shardpipe.completeness`).
    """

    shards: list[ShardCheck]
    arrays: dict[str, VerifyReport] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    job_problems: list[tuple[str, str]] = field(default_factory=list)

    @property
    def problems(self) -> list[tuple[str, str]]:
        """Every ``(key, problem)`` found."""
        return [(s.key, p) for s in self.shards for p in s.problems] + self.job_problems

    @property
    def chunk_failures(self) -> list[ChunkFailure]:
        """Every inner chunk that does not decode, with its coordinates, slot, shard and cause."""
        return [f for s in self.shards for f in s.chunk_failures]

    @property
    def ok(self) -> bool:
        """Whether no problem was found."""
        return not self.problems

    @property
    def nbytes(self) -> int:
        """Bytes of all shard objects."""
        return sum(s.nbytes for s in self.shards if s.present)

    @property
    def unused_ratio(self) -> float:
        """Share of the shard bytes no index points at (``compact`` reclaims them)."""
        unused = sum(s.unused_bytes for s in self.shards if s.present)
        return unused / self.nbytes if self.nbytes else 0.0

    def __str__(self) -> str:
        if self.arrays or self.skipped:
            return self._group_str()
        return self._array_str()

    def _group_str(self) -> str:
        lines = []
        for path, report in self.arrays.items():
            present = sum(1 for s in report.shards if s.present)
            lines.append(
                f"{path}: {present}/{len(report.shards)} shards, {report.nbytes} bytes, "
                f"{len(report.problems)} problem(s) {'OK' if report.ok else 'FAILED'}"
            )
            lines += [f"  note: {note}" for note in report.notes]
        lines += [f"{path}: skipped ({reason})" for path, reason in self.skipped.items()]
        total = self._array_str().splitlines()
        return "\n".join([*lines, f"total over {len(self.arrays)} sharded array(s):", *total])

    def _array_str(self) -> str:
        present = [s for s in self.shards if s.present]
        lines = [
            f"shards: {len(self.shards)} in grid, {len(present)} present, "
            f"{len(self.shards) - len(present)} absent (read as fill value)",
            f"inner chunks stored: {sum(s.chunks_stored for s in present)}",
            f"bytes: {self.nbytes} ({sum(s.unused_bytes for s in present)} unused, "
            f"{self.unused_ratio:.1%})",
        ]
        if not self.arrays:
            lines += [f"note: {note}" for note in self.notes]
        bad = [s for s in self.shards if s.problems]
        lines.append(f"problems: {len(self.problems)} in {len(bad)} shard(s)")
        for key, problem in self.problems[:50]:
            lines.append(f"  {key}: {problem}")
        if len(self.problems) > 50:
            lines.append(f"  ... and {len(self.problems) - 50} more")
        lines.append("OK" if self.ok else "FAILED")
        return "\n".join(lines)


def _check_entries(check: ShardCheck, index: ShardIndex, index_range: tuple[int, int]) -> None:
    offsets, lengths = index.entries[:, 0], index.entries[:, 1]
    half = (offsets == EMPTY) != (lengths == EMPTY)
    for slot in np.flatnonzero(half):
        check.problems.append(f"slot {slot}: only one of offset/nbytes is the empty marker")
    stored = np.flatnonzero(index.stored() & ~half)
    check.chunks_stored = len(stored)
    starts, stops = offsets[stored], offsets[stored] + lengths[stored]
    for slot, start, stop in zip(stored, starts, stops, strict=True):
        if stop > check.nbytes or stop < start:
            check.problems.append(
                f"slot {slot}: range [{start}, {stop}) lies outside the {check.nbytes}-byte shard"
            )
        elif start < index_range[1] and stop > index_range[0]:
            check.problems.append(f"slot {slot}: range [{start}, {stop}) overlaps the index")
    order = np.argsort(starts, kind="stable")
    for a, b in itertools.pairwise(order):
        if stops[a] > starts[b]:
            check.problems.append(f"slots {stored[a]} and {stored[b]} overlap")
    used = int(lengths[stored].sum()) + (index_range[1] - index_range[0])
    check.unused_bytes = max(0, check.nbytes - used)


def check_shard(
    store: ShardStore,
    key: str,
    layout: ShardLayout,
    codec: ChunkCodec,
    shard_format: ShardFormat,
    *,
    decode: bool = True,
    coords: Coords | None = None,
) -> ShardCheck:
    """Check the shard object at ``key``: its index, and with ``decode`` every inner chunk.

    ``coords`` (the shard's position in the shard grid) lets a failing inner
    chunk be named by its coordinates in the array's grid of inner chunks;
    without it, by its coordinates inside the shard.
    """
    check = ShardCheck(key)
    size = store.size(key)
    if size is None:
        return check
    check.present, check.nbytes = True, size
    whole = store.get(key) if size <= WHOLE_READ_LIMIT else None

    def read(start: int, stop: int) -> bytes:
        return whole[start:stop] if whole is not None else store.get_range(key, start, stop)

    try:
        index, index_range = shard_format.read_index(read, size)
    except ShardFormatError as err:
        check.problems.append(str(err))
        return check
    _check_entries(check, index, index_range)
    if check.problems or not decode:
        return check
    per_shard = layout.chunks_per_shard
    for slot in np.flatnonzero(index.stored()):
        start, nbytes = (int(v) for v in index.entries[slot])
        local = tuple(int(i) for i in np.unravel_index(slot, per_shard))
        chunk_coords = (
            local
            if coords is None
            else tuple(s * n + i for s, n, i in zip(coords, per_shard, local, strict=True))
        )
        try:
            chunk = codec.decode(read(start, start + nbytes))
        except ChunkDecodeError as err:
            _fail(check, ChunkFailure(key, chunk_coords, int(slot), str(err)))
            continue
        except Exception as err:  # any other failure is a finding too, not a crash
            _fail(
                check,
                ChunkFailure(
                    key, chunk_coords, int(slot), f"does not decode: {describe_error(err)}"
                ),
            )
            continue
        if chunk.shape != layout.chunk_shape:
            cause = f"decodes to shape {chunk.shape}, not {layout.chunk_shape}"
            _fail(check, ChunkFailure(key, chunk_coords, int(slot), cause))
    return check


def _fail(check: ShardCheck, failure: ChunkFailure) -> None:
    check.chunk_failures.append(failure)
    check.problems.append(str(failure))


def checksum_note(codec: ChunkCodec) -> str | None:
    """The report's note for an array whose inner chunks carry no checksum; None if they do."""
    if codec.checksummed:
        return None
    names = " -> ".join(str(c.to_dict()["name"]) for c in codec.codecs)
    return (
        f"inner chunks carry no checksum (inner codecs {names}): a bit flip inside a compressed "
        "chunk often decodes to wrong values without error, so not every one can be detected; "
        "write the array again with chunk_checksums=True (the default for new arrays) to "
        "detect them"
    )


def shard_checks(
    target: Any, metadata: ArrayV3Metadata, workers: int, *, decode: bool = True
) -> Iterator[ShardCheck]:
    """Check every shard of the grid, in grid order (``layout.shard_coords()``)."""
    layout = layout_of(metadata)
    shard_format = format_of(metadata)
    codec = ChunkCodec.from_metadata(metadata)
    coords = list(layout.shard_coords())
    with ThreadPoolExecutor(workers) as pool:
        yield from pool.map(
            lambda c: check_shard(
                target.shards,
                target.key(shard_format.key(c)),
                layout,
                codec,
                shard_format,
                decode=decode,
                coords=c,
            ),
            coords,
        )


def verify(
    store: Any,
    path: str | None = None,
    *,
    storage_options: dict[str, Any] | None = None,
    workers: int = 8,
    complete: bool = False,
) -> VerifyReport:
    """Check every shard of the sharded array (or every array of the group) at ``path``.

    Parameters
    ----------
    store : str, os.PathLike, zarr Store or zarr Group
        Where the array is, as for :func:`~shardpipe.to_sharded_zarr`.
    path : str, optional
        Path of the array inside ``store``.
    storage_options : dict, optional
        fsspec options for URLs.
    workers : int
        Shards checked concurrently.
    complete : bool
        Also require that no job is unfinished: a job record of a write that
        did not finish, staging data or a job marker are problems (without
        it they are notes). See :mod:`shardpipe.completeness`.

    Returns
    -------
    VerifyReport
        ``report.ok`` is False when any shard has a problem; ``str(report)``
        is a short human-readable summary.
    """
    complete = check_bool("complete", complete)
    workers = check_int("workers", workers, example=8)
    target = resolve_store(store, path, storage_options)
    check_node_present(target, "path" if path else "store")
    group = group_at(target)
    if group is not None:
        arrays, skipped = per_array(target, group, lambda t: _verify_array(t, workers, complete))
        shards = [check for report in arrays.values() for check in report.shards]
        notes = [f"{path}: {note}" for path, report in arrays.items() for note in report.notes]
        job_problems = [p for report in arrays.values() for p in report.job_problems]
        return VerifyReport(shards, arrays, skipped, notes, job_problems)
    return _verify_array(target, workers, complete)


def _verify_array(target: ResolvedStore, workers: int, complete: bool = False) -> VerifyReport:
    metadata = open_array_metadata(target, walk=True)  # MetadataError if zarr.json is broken
    if not isinstance(metadata, ArrayV3Metadata):
        raise ShardFormatError("verify checks Zarr v3 arrays sharded with sharding_indexed")
    report = VerifyReport(list(shard_checks(target, metadata, workers)))
    note = checksum_note(ChunkCodec.from_metadata(metadata))
    if note is not None and any(check.chunks_stored for check in report.shards):
        report.notes.append(note)
    by_key = {check.key: check for check in report.shards}
    for _, record in undo_records(target.shards, JobKeys(target.key(""))):
        check = by_key.setdefault(record.key, ShardCheck(record.key))
        check.problems.append(
            "left mid-update by an interrupted job (an undo record exists); run "
            "`shardpipe repair` to restore it"
        )
    absent = sum(not check.present for check in report.shards)
    findings = unfinished_work(target, absent, len(report.shards))
    if complete:
        report.job_problems += findings
    else:
        report.notes += [f"{key}: {finding}" for key, finding in findings]
    return report
