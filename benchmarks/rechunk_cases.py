"""The cases of the rechunk sweep (:mod:`benchmarks.rechunk_sweep`): sources, targets, checks.

Three sources, each a Zarr v2 array compressed with numcodecs ``Zstd(level=1)``
and chunked one plane at a time, as an acquisition writes it; each becomes a
Zarr v3 sharded target with the same codecs for every writer: inner chunks
``bytes`` (little endian), ``zstd`` level 1, ``crc32c`` (shardpipe's default
chain); the shard index ``bytes`` + ``crc32c`` at the end; fill value 0.

* ``slabs``: (256, 1024, 1024) uint16 (512 MiB), chunks (1, 1024, 1024), into
  shards (128, 256, 256) of inner chunks (64, 64, 64);
* ``timeseries``: 730 time slices (1, 256, 512) float32 (365 MiB), into
  shards (730, 128, 128) of inner chunks (730, 32, 32): every target chunk
  needs every source chunk (an all-to-all rechunk);
* ``frames``: (200, 700, 600) uint16 camera frames (160 MiB), chunks
  (1, 700, 600), into shards (128, 256, 256) of inner chunks (64, 64, 64); the
  shape is not a multiple of either, so edge shards and chunks are partial.

``--small`` keeps each case's geometry at a few MiB (smaller shards and
chunks too), to check the harness, not to measure. A source is written once
per work folder and reused while its ``done`` file matches its description.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

Shape = tuple[int, ...]
Region = tuple[slice, ...]

GENERATOR_VERSION = 1
"""Bump when the data a source holds changes, so cached sources are written again."""


@dataclass(frozen=True)
class RechunkCase:
    """One source array and the sharded target every writer makes of it.

    Attributes
    ----------
    name : str
        ``slabs``, ``timeseries`` or ``frames``.
    shape : tuple of int
        The array's shape.
    dtype : str
        Its NumPy dtype name.
    source_chunks : tuple of int
        The Zarr v2 source's chunks.
    shards : tuple of int
        The target's shard shape.
    chunks : tuple of int
        The target's inner chunk shape.
    """

    name: str
    shape: Shape
    dtype: str
    source_chunks: Shape
    shards: Shape
    chunks: Shape

    @property
    def nbytes(self) -> int:
        """Raw bytes of the array."""
        return math.prod(self.shape) * np.dtype(self.dtype).itemsize

    def describe(self) -> str:
        """One line: shape, dtype, source chunks, target shards and chunks."""
        return (
            f"{self.name}: {self.shape} {self.dtype} ({self.nbytes / 2**20:.0f} MiB), "
            f"chunks {self.source_chunks} -> shards {self.shards}, chunks {self.chunks}"
        )


CASES = {
    "slabs": RechunkCase(
        "slabs", (256, 1024, 1024), "uint16", (1, 1024, 1024), (128, 256, 256), (64, 64, 64)
    ),
    "timeseries": RechunkCase(
        "timeseries", (730, 256, 512), "float32", (1, 256, 512), (730, 128, 128), (730, 32, 32)
    ),
    "frames": RechunkCase(
        "frames", (200, 700, 600), "uint16", (1, 700, 600), (128, 256, 256), (64, 64, 64)
    ),
}
SMALL_CASES = {
    "slabs": RechunkCase(
        "slabs", (64, 256, 256), "uint16", (1, 256, 256), (32, 64, 64), (16, 16, 16)
    ),
    "timeseries": RechunkCase(
        "timeseries", (146, 64, 128), "float32", (1, 64, 128), (146, 32, 32), (146, 8, 8)
    ),
    "frames": RechunkCase(
        "frames", (50, 175, 150), "uint16", (1, 175, 150), (32, 64, 64), (16, 16, 16)
    ),
}


def planes(case: RechunkCase, start: int, stop: int) -> np.ndarray:
    """Planes ``start:stop`` of the case's data: deterministic in the plane index alone.

    ``slabs`` and ``frames``: a smooth uint16 field that drifts from plane to
    plane plus 6 bits of noise (zstd-1 keeps about three quarters);
    ``timeseries``: a float32 seasonal cycle per pixel plus noise.
    """
    ny, nx = case.shape[1:]
    y, x = np.meshgrid(np.arange(ny), np.arange(nx), indexing="ij")
    out = np.empty((stop - start, ny, nx), case.dtype)
    for i, z in enumerate(range(start, stop)):
        rng = np.random.default_rng([GENERATOR_VERSION, z])
        if case.dtype == "float32":
            phase = (x + 2 * y) / 150.0
            season = 10.0 * np.sin(2 * np.pi * z / 365.0 + phase) + 0.01 * y
            out[i] = season + rng.normal(0.0, 0.5, (ny, nx))
        else:
            base = 1000 + 500 * np.sin((x + y + z) / 97.0)
            out[i] = base + rng.integers(0, 64, (ny, nx))
    return out


def source_path(case: RechunkCase, work: Path) -> Path:
    """Where the case's source lives in the work folder (its name says its shape)."""
    return work / "sources" / f"{case.name}-{'x'.join(map(str, case.shape))}-v2.zarr"


def ensure_source(case: RechunkCase, work: Path) -> tuple[Path, bool]:
    """Write the case's Zarr v2 source unless the work folder holds it; (path, written now)."""
    import zarr
    from numcodecs import Zstd  # type: ignore[import-untyped]

    path = source_path(case, work)
    done = path.with_suffix(".done")
    description = json.dumps(asdict(case) | {"generator": GENERATOR_VERSION})
    if done.is_file() and done.read_text() == description and path.is_dir():
        return path, False
    shutil.rmtree(path, ignore_errors=True)
    array = zarr.create_array(
        path,
        shape=case.shape,
        chunks=case.source_chunks,
        dtype=case.dtype,
        zarr_format=2,
        compressors=Zstd(level=1),
        fill_value=0,
    )
    step = 16
    for z in range(0, case.shape[0], step):
        array[z : z + step] = planes(case, z, min(z + step, case.shape[0]))
    done.write_text(description)
    return path, True


def target_codecs() -> dict[str, Any]:
    """``zarr.create_array`` keywords of the target's codecs: zstd-1 then crc32c per chunk."""
    from zarr.codecs import Crc32cCodec, ZstdCodec

    return {"compressors": [ZstdCodec(level=1), Crc32cCodec()], "fill_value": 0}


def create_target(case: RechunkCase, path: Path) -> Any:
    """The empty sharded target, created with zarr-python (for dask, cubed and rechunker)."""
    import zarr

    return zarr.create_array(
        path,
        shape=case.shape,
        dtype=case.dtype,
        shards=case.shards,
        chunks=case.chunks,
        overwrite=True,
        **target_codecs(),
    )


def target_metadata(case: RechunkCase) -> dict[str, Any]:
    """The target's ``zarr.json`` document (what tensorstore and the limit write)."""
    little = {"name": "bytes", "configuration": {"endian": "little"}}
    zstd = {"name": "zstd", "configuration": {"level": 1, "checksum": False}}
    sharding = {
        "chunk_shape": list(case.chunks),
        "codecs": [little, zstd, {"name": "crc32c"}],
        "index_codecs": [little, {"name": "crc32c"}],
        "index_location": "end",
    }
    return {
        "zarr_format": 3,
        "node_type": "array",
        "shape": list(case.shape),
        "data_type": case.dtype,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(case.shards)}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0,
        "codecs": [{"name": "sharding_indexed", "configuration": sharding}],
        "attributes": {},
    }


def regions(shape: Shape, step: Shape) -> Iterator[Region]:
    """The boxes of a regular grid of ``step`` over ``shape``, in C order, clipped."""
    counts = [range(0, n, s) for n, s in zip(shape, step, strict=True)]
    for corner in np.ndindex(*(len(c) for c in counts)):
        yield tuple(
            slice(c[i], min(c[i] + s, n))
            for c, i, s, n in zip(counts, corner, step, shape, strict=True)
        )


def compare(case: RechunkCase, source: Path, target: Path) -> list[str]:
    """Read the target back with zarr-python and compare it with the source; the problems.

    Checks the layout (shape, dtype, shards, inner chunks, codecs ending in
    ``crc32c``) and every value, shard by shard, against the source read
    whole once.
    """
    import zarr

    problems = []
    got = zarr.open_array(target, mode="r")
    if tuple(got.shape) != case.shape or got.dtype != np.dtype(case.dtype):
        return [f"target is {got.shape} {got.dtype}, not {case.shape} {case.dtype}"]
    if tuple(got.shards or ()) != case.shards or tuple(got.chunks) != case.chunks:
        problems.append(f"target has shards {got.shards} and chunks {got.chunks}")
    names = [type(c).__name__ for c in got.compressors]
    if names[-1:] != ["Crc32cCodec"] or "ZstdCodec" not in names:
        problems.append(f"target's inner codecs are {names}, not zstd then crc32c")
    want = np.asarray(zarr.open_array(source, mode="r")[...])
    wrong = [r for r in regions(case.shape, case.shards) if not np.array_equal(got[r], want[r])]
    if wrong:
        problems.append(f"{len(wrong)} shard regions differ from the source, first {wrong[0]}")
    return problems
