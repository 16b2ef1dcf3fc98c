"""Checking and describing sharded Neuroglancer precomputed volumes (``verify``, ``info``).

:func:`shardpipe.verify` and :func:`shardpipe.info` come here when the path
holds a precomputed ``info`` file instead of ``zarr.json``. Every shard
file of every sharded scale is read:

* its name is a shard number the spec has (``<hex>.shard``);
* its shard index lies inside the file and every minishard index decodes;
* every chunk listed is a chunk of the scale's grid, in the shard and the
  minishard its id hashes to, listed once, inside the file;
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

from shardpipe.core.morton import morton_coords
from shardpipe.core.precomputed_plan import ScaleGrid
from shardpipe.errors import ShardFormatError
from shardpipe.formats.precomputed import PrecomputedSharding
from shardpipe.formats.precomputed_chunks import decode_chunk
from shardpipe.storage.local import TEMPORARY_SUFFIX
from shardpipe.storage.resolve import ResolvedStore

MOST_PROBLEMS = 50
"""Problems listed per scale; the rest are counted."""


@dataclass
class ScaleReport:
    """What one scale holds and what is wrong with it.

    Attributes
    ----------
    key : str
        The scale's directory.
    size, chunk_size : tuple of int
        Voxels, and voxels per chunk.
    sharding : dict or None
        Its sharding spec (None: an unsharded scale, not checked).
    n_chunks : int
        Chunks in the scale's grid.
    chunks_present, shards_present, nbytes : int
        Chunks stored, shard files, their bytes.
    problems : list of str
        The first :data:`MOST_PROBLEMS` problems.
    n_problems : int
        All problems.
    leftovers : int
        Temporary files of writes that did not finish (``*.shardpipe-tmp``):
        not shards, not problems.
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

    def problem(self, text: str) -> None:
        """Record a problem."""
        self.n_problems += 1
        if len(self.problems) < MOST_PROBLEMS:
            self.problems.append(text)


@dataclass
class PrecomputedReport:
    """The report on a precomputed volume: one :class:`ScaleReport` per scale."""

    volume_type: str
    data_type: str
    num_channels: int
    scales: list[ScaleReport]
    checked_chunks: bool

    @property
    def ok(self) -> bool:
        """True when no scale has a problem."""
        return not any(s.n_problems for s in self.scales)

    def __str__(self) -> str:
        lines = [
            f"neuroglancer precomputed {self.volume_type}: {self.data_type}, "
            f"{self.num_channels} channel(s), {len(self.scales)} scale(s)"
        ]
        for s in self.scales:
            how = "unsharded (not checked)" if s.sharding is None else _describe(s.sharding)
            lines.append(
                f"  {s.key}: size {list(s.size)}, chunks {list(s.chunk_size)}, {how}; "
                f"{s.shards_present} shard file(s), {s.chunks_present} of {s.n_chunks} chunks, "
                f"{s.nbytes:,} bytes"
                + (
                    f"; {s.leftovers} temporary file(s) of an unfinished write"
                    if s.leftovers
                    else ""
                )
            )
            lines += [f"    problem: {p}" for p in s.problems]
            if s.n_problems > len(s.problems):
                lines.append(f"    ... and {s.n_problems - len(s.problems)} more problems")
        if self.checked_chunks:
            lines.append("OK" if self.ok else "PROBLEMS FOUND")
        return "\n".join(lines)


def _describe(spec: dict[str, Any]) -> str:
    return (
        f"{spec['hash']} hash, preshift {spec['preshift_bits']}, minishard "
        f"{spec['minishard_bits']}, shard {spec['shard_bits']} bits"
    )


def read_info(target: ResolvedStore) -> dict[str, Any] | None:
    """The precomputed ``info`` document at the target, or None when there is none."""
    raw = target.shards.get(target.key("info"))
    if raw is None:
        return None
    try:
        document = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(document, dict):
        return None
    kind = document.get("@type")
    if kind == "neuroglancer_multiscale_volume":
        return document
    # "@type" is optional (cloud-volume leaves it out): a data type and scales will do
    if kind is None and "data_type" in document and isinstance(document.get("scales"), list):
        return document
    return None


def check_volume(
    target: ResolvedStore, info: dict[str, Any], *, decode: bool = True
) -> PrecomputedReport:
    """Check (``decode``: down to every chunk's bytes) or describe the volume at ``target``."""
    dtype = np.dtype(info.get("data_type", "uint8"))
    channels = int(info.get("num_channels", 1))
    scales = []
    for scale in info.get("scales", []):
        grid = ScaleGrid(tuple(scale["size"]), tuple(scale["chunk_sizes"][0]))
        sharding = scale.get("sharding")
        report = ScaleReport(
            scale["key"], grid.size, grid.chunk_size, sharding, math.prod(grid.grid)
        )
        if sharding is not None:
            spec = PrecomputedSharding.from_json(sharding)
            chunks = _Chunks(str(scale.get("encoding", "raw")), dtype, channels) if decode else None
            _check_scale(target, report, grid, spec, chunks)
        scales.append(report)
    return PrecomputedReport(
        str(info.get("type")), dtype.name, channels, scales, checked_chunks=decode
    )


@dataclass(frozen=True)
class _Chunks:
    """How a scale's chunks decode: encoding, data type, channels."""

    encoding: str
    dtype: np.dtype[Any]
    channels: int


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
    seen: set[int] = set()
    for key in store.list(prefix):
        file = key[len(prefix) :]
        if file.endswith(TEMPORARY_SUFFIX):
            report.leftovers += 1
            continue
        if "/" in file or not name.match(file) or int(file[:-6], 16) >> spec.shard_bits:
            report.problem(f"{key}: not a shard file of this scale's sharding")
            continue
        shard = int(file[:-6], 16)
        size = store.size(key)
        if size is None:
            continue
        report.shards_present += 1
        report.nbytes += size

        def read(start: int, stop: int, key: str = key) -> bytes:
            return store.get_range(key, start, stop)

        try:
            minishards = spec.read_minishards(read, size, key)
        except ShardFormatError as err:
            report.problem(str(err))
            continue
        for minishard, listed in minishards.items():
            ids = np.array([i for i, _, _ in listed], dtype=np.uint64)
            coords = morton_coords(ids, grid.grid)
            inside = (coords < np.array(grid.grid)).all(axis=1) & (
                ids < np.uint64(1 << max(grid.id_bits, 0))
            )
            shards, minis = spec.locate(ids)
            for n, (chunk_id, start, stop) in enumerate(listed):
                where = f"{key}: chunk {chunk_id}"
                if not inside[n]:
                    report.problem(f"{where} is not a chunk of the {list(grid.grid)} grid")
                    continue
                if int(shards[n]) != shard or int(minis[n]) != minishard:
                    report.problem(
                        f"{where} is listed in minishard {minishard} but hashes to shard "
                        f"{int(shards[n])}, minishard {int(minis[n])}"
                    )
                if chunk_id in seen:
                    report.problem(f"{where} is listed twice")
                seen.add(chunk_id)
                report.chunks_present += 1
                if chunks is not None:
                    data = store.get_range(key, start, stop)
                    _check_chunk(data, spec, grid, coords[n], chunks, where, report)


def _check_chunk(
    data: bytes,
    spec: PrecomputedSharding,
    grid: ScaleGrid,
    coords: np.ndarray,
    chunks: _Chunks,
    where: str,
    report: ScaleReport,
) -> None:
    box = grid.chunk_box([int(c) for c in coords])
    shape = (*(s.stop - s.start for s in box), chunks.channels)
    try:
        decode_chunk(spec.decode_chunk(data), chunks.encoding, shape, chunks.dtype)
    except ImportError:
        return  # jpeg or compressed_segmentation without their package: not decoded
    except Exception as err:  # each decoder has its own errors: any of them is a finding
        report.problem(f"{where} does not decode ({type(err).__name__}: {err})")
