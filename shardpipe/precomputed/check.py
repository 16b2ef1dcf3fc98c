"""Checking and describing sharded Neuroglancer precomputed volumes (``verify``, ``info``).

:func:`shardpipe.verify` and :func:`shardpipe.info` come here when the path
holds a precomputed ``info`` file instead of ``zarr.json``. Every shard
file of every sharded scale is read:

* its name is a shard number the spec has (``<hex>.shard``);
* its index is read through the shard-format protocol
  (:mod:`shardpipe.formats.precomputed_shards`): the shard index lies
  inside the file and every minishard index decodes; every chunk listed is
  a chunk of the scale's grid, in the shard and the minishard its id hashes
  to, listed once, inside the file, apart from the indexes and from every
  other chunk;
* with ``decode`` (``verify``), every chunk's bytes decode (``gzip``) and a
  ``raw`` chunk has exactly the bytes its (truncated) box holds.

Chunks absent from every shard read as zeros, as Neuroglancer reads them.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shardpipe import advice
from shardpipe.codec.bounded import gunzip
from shardpipe.core.display import ShowsSummary, Summary, format_count, format_nbytes
from shardpipe.core.morton import morton_coords
from shardpipe.core.precomputed_plan import ScaleGrid
from shardpipe.errors import ChunkDecodeError, MetadataError, ShardFormatError
from shardpipe.formats.base import read_checked_index
from shardpipe.formats.precomputed import PrecomputedSharding
from shardpipe.formats.precomputed_chunks import CSEG_BLOCK, decode_chunk, max_encoded_nbytes
from shardpipe.formats.precomputed_chunks import ENCODINGS as DECODED
from shardpipe.formats.precomputed_info import MAX_INFO_NBYTES, VolumeInfo, parse_info
from shardpipe.formats.precomputed_shards import listed_shard_format
from shardpipe.journal.unfinished import UnfinishedJob, started_at, unfinished_lines
from shardpipe.storage.keys import PRECOMPUTED_UNFINISHED, TEMPORARY_SUFFIX
from shardpipe.storage.resolve import ResolvedStore

MOST_PROBLEMS = 50
"""Problems listed per scale; the rest are counted."""


@dataclass(repr=False)
class ScaleReport(ShowsSummary):
    """What one scale holds and what is wrong with it.

    Attributes
    ----------
    key : str
        The scale's directory.
    size, chunk_size : tuple of int
        Voxels, and voxels per chunk.
    sharding : dict or None
        Its sharding spec (None: an unsharded scale, one file per chunk).
    n_chunks : int
        Chunks in the scale's grid.
    chunks_present, shards_present, nbytes : int
        Chunks stored, shard files, the bytes of the files (shards or chunk files).
    problems : list of str
        The first :data:`~shardpipe.precomputed.check.MOST_PROBLEMS` problems.
    n_problems : int
        All problems.
    leftovers : int
        Temporary files of writes that did not finish (names ending in
        :data:`~shardpipe.storage.keys.TEMPORARY_SUFFIX`):
        not shards, not problems.
    notes : list of str
        What was not checked, and why (chunks of an encoding shardpipe does
        not decode).
    """

    key: str
    size: tuple[int, ...]
    chunk_size: tuple[int, ...]
    sharding: dict[str, Any] | None
    n_chunks: int
    chunks_present: int = 0
    shards_present: int = 0
    nbytes: int = 0
    problems: list[str] = field(default_factory=list)
    n_problems: int = 0
    leftovers: int = 0
    notes: list[str] = field(default_factory=list)

    def _line(self) -> str:
        return (
            f"{format_count(self.shards_present)} shard file(s), "
            f"{format_count(self.chunks_present)} of {format_count(self.n_chunks)} chunks, "
            f"{format_nbytes(self.nbytes)}"
        )

    def _summary(self) -> Summary:
        rows = [
            ("size", str(list(self.size))),
            ("chunk size", str(list(self.chunk_size))),
            ("sharding", "unsharded" if self.sharding is None else _describe(self.sharding)),
            ("stored", self._line()),
        ]
        if self.leftovers:
            rows.append(("leftovers", f"{format_count(self.leftovers)} temporary file(s)"))
        if self.notes:
            rows.append(("notes", f"{len(self.notes)} (see .notes)"))
        status = "OK" if not self.n_problems else "PROBLEMS FOUND"
        return Summary(f"ScaleReport {self.key}", status, rows, self.problems, self.n_problems)

    def problem(self, text: str) -> None:
        """Record a problem."""
        self.n_problems += 1
        if len(self.problems) < MOST_PROBLEMS:
            self.problems.append(text)


@dataclass(repr=False)
class PrecomputedReport(ShowsSummary):
    """The report on a precomputed volume: one :class:`ScaleReport` per scale.

    ``problems`` are the volume's own: the marker of a write that did not
    finish (its shards may be missing, or be the old volume's), which
    ``interrupted`` holds as an :class:`~shardpipe.journal.unfinished.UnfinishedJob`.
    """

    volume_type: str
    data_type: str
    num_channels: int
    scales: list[ScaleReport]
    checked_chunks: bool
    problems: list[str] = field(default_factory=list)
    interrupted: list[UnfinishedJob] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when neither the volume nor a scale has a problem."""
        return not self.problems and not any(s.n_problems for s in self.scales)

    @property
    def n_problems(self) -> int:
        """The volume's problems and every scale's."""
        return len(self.problems) + sum(s.n_problems for s in self.scales)

    def _summary(self) -> Summary:
        rows = [
            ("volume", f"{self.volume_type}, {self.data_type}, {self.num_channels} channel(s)"),
            *((s.key, s._line()) for s in self.scales),
        ]
        problems = [*self.problems, *(f"{s.key}: {p}" for s in self.scales for p in s.problems)]
        status = ("OK" if self.ok else "PROBLEMS FOUND") if self.checked_chunks else None
        if status is None and not self.ok:
            status = "PROBLEMS FOUND"
        return Summary(
            "PrecomputedReport", status, rows, problems, self.n_problems, "scales[i].problems"
        )

    def __str__(self) -> str:
        lines = [
            f"neuroglancer precomputed {self.volume_type}: {self.data_type}, "
            f"{self.num_channels} channel(s), {len(self.scales)} scale(s)"
        ]
        shown = {f"{job.key}: {job.describe()}" for job in self.interrupted}
        lines += [f"  problem: {p}" for p in self.problems if p not in shown]
        for s in self.scales:
            how = "unsharded" if s.sharding is None else _describe(s.sharding)
            lines.append(
                f"  {s.key}: size {list(s.size)}, chunks {list(s.chunk_size)}, {how}; "
                f"{s._line()}"
                + (
                    f"; {s.leftovers} temporary file(s) of an unfinished write"
                    if s.leftovers
                    else ""
                )
            )
            lines += [f"    note: {n}" for n in s.notes]
            lines += [f"    problem: {p}" for p in s.problems]
            if s.n_problems > len(s.problems):
                lines.append(f"    ... and {s.n_problems - len(s.problems):,} more problems")
        lines += unfinished_lines(self.interrupted)
        if self.checked_chunks:
            lines.append("OK" if self.ok else "PROBLEMS FOUND")
        return "\n".join(lines)


def _describe(spec: dict[str, Any]) -> str:
    return (
        f"{spec['hash']} hash, preshift {spec['preshift_bits']}, minishard "
        f"{spec['minishard_bits']}, shard {spec['shard_bits']} bits"
    )


def read_info(target: ResolvedStore) -> VolumeInfo | None:
    """The checked ``info`` file at the target, or None when it holds no precomputed volume.

    Raises
    ------
    shardpipe.errors.MetadataError
        When the ``info`` file claims a precomputed volume but a member is
        wrong (:func:`~shardpipe.formats.precomputed_info.parse_info`).
    shardpipe.errors.UnsafeKeyError
        When a scale's key would lead outside the volume.
    """
    key = target.key("info")
    size = target.shards.size(key)
    if size is None:
        return None
    if size > MAX_INFO_NBYTES:
        raise MetadataError(
            f"{key!r} has {size:,} bytes, more than the {MAX_INFO_NBYTES:,} an info file may have"
        )
    raw = target.shards.get(key)
    return None if raw is None else parse_info(raw, key)


def check_volume(
    target: ResolvedStore, info: VolumeInfo, *, decode: bool = True
) -> PrecomputedReport:
    """Check (``decode``: down to every chunk's bytes) or describe the volume at ``target``."""
    scales = []
    for scale in info.scales:
        grid = scale.grid
        spec = scale.sharding
        report = ScaleReport(
            scale.key,
            grid.size,
            grid.chunk_size,
            None if spec is None else spec.to_json(),
            math.prod(grid.grid),
        )
        chunks = None
        if decode and scale.encoding in DECODED:
            block = scale.block_size or CSEG_BLOCK
            chunks = _Chunks(scale.encoding, info.dtype, info.num_channels, block)
        elif decode:
            report.notes.append(f"chunks encoded as {scale.encoding!r} are not decoded")
        if spec is not None:
            _check_scale(target, report, grid, spec, chunks)
        else:
            _check_unsharded(target, report, grid, scale.voxel_offset, chunks)
        scales.append(report)
    volume = PrecomputedReport(
        info.volume_type, info.data_type, info.num_channels, scales, checked_chunks=decode
    )
    job = volume_job(target)
    if job is not None:
        volume.problems.append(f"{job.key}: {job.describe()}")
        volume.interrupted.append(job)
    return volume


def volume_job(target: ResolvedStore) -> UnfinishedJob | None:
    """The write of the volume at ``target`` its marker shows unfinished, or None.

    The marker's bytes are untrusted: only a plausible ``started`` time is
    taken from a small one.
    """
    marker = target.key(PRECOMPUTED_UNFINISHED)
    size = target.shards.size(marker)
    if size is None:
        return None
    started = None
    if size <= 4096:
        try:
            document = json.loads(target.shards.get(marker) or b"{}")
            started = started_at(document.get("started"))
        except (ValueError, AttributeError, RecursionError):
            pass
    return UnfinishedJob(
        "precomputed",
        marker,
        f"the precomputed volume at {advice.place(target.path)} (its shards may be missing "
        "or be the old volume's)",
        started,
        f"write it again with {advice.setting('overwrite')}",
    )


_CHUNK_FILE = re.compile(r"^(-?\d+)-(-?\d+)_(-?\d+)-(-?\d+)_(-?\d+)-(-?\d+)(\.gz)?$")


def _check_unsharded(
    target: ResolvedStore,
    report: ScaleReport,
    grid: ScaleGrid,
    offset: tuple[int, ...],
    chunks: _Chunks | None,
) -> None:
    """An unsharded scale: one file per chunk, ``x0-x1_y0-y1_z0-z1`` (``.gz``: gzip'd)."""
    store, prefix = target.shards, target.key(f"{report.key}/")
    for key in store.list(prefix):
        file = key[len(prefix) :]
        if file.endswith(TEMPORARY_SUFFIX):
            report.leftovers += 1
            continue
        coords = _chunk_of(file, grid, offset)
        size = store.size(key)
        if coords is None:
            report.problem(f"{key}: not a chunk file of this scale's grid")
            continue
        if size is None:
            continue
        report.chunks_present += 1
        report.nbytes += size
        data = store.get(key) if chunks is not None else None
        if chunks is None or data is None:
            continue
        if file.endswith(".gz"):
            box = grid.chunk_box(coords)
            shape = (*(s.stop - s.start for s in box), chunks.channels)
            try:  # never past what the chunk's encoding can take
                data = gunzip(data, max_encoded_nbytes(shape, chunks.dtype, chunks.encoding))
            except ChunkDecodeError as err:
                report.problem(f"{key} does not gunzip ({err})")
                continue
        _check_chunk(data, None, grid, np.array(coords), chunks, key, report)


def _chunk_of(file: str, grid: ScaleGrid, offset: tuple[int, ...]) -> tuple[int, ...] | None:
    """Grid coordinates of the chunk an unsharded chunk file is named for, or None."""
    match = _CHUNK_FILE.match(file)
    if match is None:
        return None
    bounds = [int(v) for v in match.groups()[:6]]
    starts, stops = bounds[0::2], bounds[1::2]
    coords = tuple((a - o) // c for a, o, c in zip(starts, offset, grid.chunk_size, strict=True))
    if any(not 0 <= c < n for c, n in zip(coords, grid.grid, strict=True)):
        return None
    box = [(s.start + o, s.stop + o) for s, o in zip(grid.chunk_box(coords), offset, strict=True)]
    return coords if box == list(zip(starts, stops, strict=True)) else None


@dataclass(frozen=True)
class _Chunks:
    """How a scale's chunks decode: encoding, data type, channels."""

    encoding: str
    dtype: np.dtype[Any]
    channels: int
    block_size: tuple[int, ...]


def _check_scale(
    target: ResolvedStore,
    report: ScaleReport,
    grid: ScaleGrid,
    spec: PrecomputedSharding,
    chunks: _Chunks | None,
) -> None:
    store, prefix = target.shards, target.key(f"{report.key}/")
    digits = -(-spec.shard_bits // 4)
    name = re.compile(rf"^[0-9a-f]{{{max(digits, 1)}}}\.shard$")
    for key in store.list(prefix):
        file = key[len(prefix) :]
        if file.endswith(TEMPORARY_SUFFIX):
            report.leftovers += 1
            continue
        if "/" in file or not name.match(file) or int(file[:-6], 16) >> spec.shard_bits:
            report.problem(f"{key}: not a shard file of this scale's sharding")
            continue
        shard = (int(file[:-6], 16),)
        size = store.size(key)
        if size is None:
            continue
        report.shards_present += 1
        report.nbytes += size

        def read(start: int, stop: int, key: str = key) -> bytes:
            return store.get_range(key, start, stop)

        try:  # the shard as its own indexes list it: the grid is never enumerated
            try:
                shard_format = listed_shard_format(grid, spec, shard[0], read, size)
            except ShardFormatError as err:
                raise ShardFormatError(f"shard {key!r}: {err}") from err
            index, _ = read_checked_index(shard_format, read, size, key, shard=shard)
        except ShardFormatError as err:
            report.problem(str(err))
            continue
        slots = np.flatnonzero(index.stored())
        report.chunks_present += len(slots)
        if chunks is None:
            continue
        ids = shard_format.ids(shard, slots)
        for chunk_id, coords, (start, nbytes) in zip(
            ids.tolist(), morton_coords(ids, grid.grid), index.entries[slots].tolist(), strict=True
        ):
            data = store.get_range(key, start, start + nbytes)
            _check_chunk(data, spec, grid, coords, chunks, f"{key}: chunk {chunk_id}", report)


def _check_chunk(
    data: bytes,
    spec: PrecomputedSharding | None,
    grid: ScaleGrid,
    coords: np.ndarray,
    chunks: _Chunks,
    where: str,
    report: ScaleReport,
) -> None:
    box = grid.chunk_box([int(c) for c in coords])
    shape = (*(s.stop - s.start for s in box), chunks.channels)
    try:
        limit = max_encoded_nbytes(shape, chunks.dtype, chunks.encoding)
        stored = data if spec is None else spec.decode_chunk(data, limit)
        decode_chunk(stored, chunks.encoding, shape, chunks.dtype, chunks.block_size)
    except ImportError:
        return  # jpeg or compressed_segmentation without their package: not decoded
    except Exception as err:  # each decoder has its own errors: any of them is a finding
        report.problem(f"{where} does not decode ({type(err).__name__}: {err})")
