"""``verify``: check every shard of a sharded Zarr v3 array.

For each shard object: the index has the right size and its CRC32C
matches; every stored inner chunk lies inside the object and outside the
index; no two chunks overlap; an entry is either fully empty or fully set;
and every stored chunk decodes to an inner chunk of the right shape.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import zarr
from zarr.core.metadata.v3 import ArrayV3Metadata

from shardpipe.core.grid import ShardLayout
from shardpipe.encoding import ChunkCodec
from shardpipe.errors import ShardFormatError
from shardpipe.formats.base import EMPTY, ShardFormat, ShardIndex
from shardpipe.groups import group_at, per_array
from shardpipe.journal import JobKeys, undo_records
from shardpipe.metadata import format_of, layout_of
from shardpipe.storage.base import ShardStore
from shardpipe.storage.resolve import ResolvedStore, resolve_store

WHOLE_READ_LIMIT = 256 << 20
"""Shards up to this size are read in one request; larger ones by ranges."""


@dataclass
class ShardCheck:
    """The outcome of checking one shard object."""

    key: str
    present: bool = False
    nbytes: int = 0
    chunks_stored: int = 0
    unused_bytes: int = 0
    problems: list[str] = field(default_factory=list)


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
    """

    shards: list[ShardCheck]
    arrays: dict[str, VerifyReport] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)

    @property
    def problems(self) -> list[tuple[str, str]]:
        """Every ``(key, problem)`` found."""
        return [(s.key, p) for s in self.shards for p in s.problems]

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
) -> ShardCheck:
    """Check the shard object at ``key``: its index, and with ``decode`` every inner chunk."""
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
    for slot in np.flatnonzero(index.stored()):
        start, nbytes = (int(v) for v in index.entries[slot])
        try:
            chunk = codec.decode(read(start, start + nbytes))
        except Exception as err:  # any codec failure is a finding, not a crash
            check.problems.append(f"slot {slot}: inner chunk does not decode ({err})")
            continue
        if chunk.shape != layout.chunk_shape:
            check.problems.append(f"slot {slot}: decodes to shape {chunk.shape}")
    return check


def shard_checks(
    target: Any, metadata: ArrayV3Metadata, workers: int, *, decode: bool = True
) -> Iterator[ShardCheck]:
    """Check every shard of the grid, in grid order (``layout.shard_coords()``)."""
    layout = layout_of(metadata)
    shard_format = format_of(metadata)
    codec = ChunkCodec.from_metadata(metadata)
    keys = [target.key(shard_format.key(c)) for c in layout.shard_coords()]
    with ThreadPoolExecutor(workers) as pool:
        yield from pool.map(
            lambda k: check_shard(target.shards, k, layout, codec, shard_format, decode=decode),
            keys,
        )


def verify(
    store: Any,
    path: str | None = None,
    *,
    storage_options: dict[str, Any] | None = None,
    workers: int = 8,
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

    Returns
    -------
    VerifyReport
        ``report.ok`` is False when any shard has a problem; ``str(report)``
        is a short human-readable summary.
    """
    target = resolve_store(store, path, storage_options)
    group = group_at(target)
    if group is not None:
        arrays, skipped = per_array(target, group, lambda t: _verify_array(t, workers))
        shards = [check for report in arrays.values() for check in report.shards]
        return VerifyReport(shards, arrays, skipped)
    return _verify_array(target, workers)


def _verify_array(target: ResolvedStore, workers: int) -> VerifyReport:
    array = zarr.open_array(target.zarr_store, path=target.path, mode="r")
    metadata = array.metadata
    if not isinstance(metadata, ArrayV3Metadata):
        raise ShardFormatError("verify checks Zarr v3 arrays sharded with sharding_indexed")
    report = VerifyReport(list(shard_checks(target, metadata, workers)))
    by_key = {check.key: check for check in report.shards}
    for _, record in undo_records(target.shards, JobKeys(target.key(""))):
        check = by_key.setdefault(record.key, ShardCheck(record.key))
        check.problems.append(
            "left mid-update by an interrupted job (an undo record exists); run "
            "`shardpipe repair` to restore it"
        )
    return report
