"""The format-work limit: the work any writer of the suite's sharded array must do, done plainly.

Issue #30 replaced the encode-only and raw-write limits (which skip work the
format requires) with this one as the anchor of shardpipe's targets. It is a
plain loop over shard-aligned blocks of the NumPy volume (one task per shard,
one thread per core, as shardpipe's threaded scheduler runs), doing for each
shard exactly what the array's format asks of any writer:

1. **cut** each (64, 64, 64) inner chunk out of the volume (a copy into a
   buffer the thread reuses: a chunk of a C-order volume is not contiguous);
2. **encode** it with numcodecs ``Zstd(level=1)`` (the codec zarr-python's
   ``ZstdCodec`` runs; ``none``: the cut bytes are the encoding);
3. **CRC32C** the encoded bytes (the ``crc32c`` codec of shardpipe's default
   chain), kept as a separate 4-byte buffer (no copy of the chunk);
4. build the **index** (16 bytes per inner chunk, little endian) and its
   CRC32C;
5. **write** the shard with one ``os.writev`` of all those buffers at its key
   ``c/i/j/k``; durable (``format-fsync``): into a temporary file beside the
   key, ``fsync``, ``os.replace`` onto the key, ``fsync`` of the directory.

The array's ``zarr.json`` is written too (once per write), so the output is a
real sharded array: the child reads it back with zarr-python like every
writer's. Nothing is skipped (no fill-value test: the suite's volumes have no
empty chunk) and nothing more is done (no Dask, no planning).
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.cases import Case
from benchmarks.volumes import Region, grid

THREADS = os.cpu_count() or 1


def array_metadata(case: Case, dtype: np.dtype[Any]) -> bytes:
    """``zarr.json`` of the case's array with the inner codecs + ``crc32c`` (shardpipe's chain)."""
    little = {"name": "bytes", "configuration": {"endian": "little"}}
    zstd = {"name": "zstd", "configuration": {"level": 1, "checksum": False}}
    inner = [little, zstd] if case.codec == "zstd1" else [little]
    sharding = {
        "chunk_shape": list(case.chunks),
        "codecs": [*inner, {"name": "crc32c"}],
        "index_codecs": [little, {"name": "crc32c"}],
        "index_location": "end",
    }
    document = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": list(case.shape),
        "data_type": dtype.name,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(case.shards)}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0,
        "codecs": [{"name": "sharding_indexed", "configuration": sharding}],
        "attributes": {},
    }
    return json.dumps(document, indent=2).encode()


def write_file(path: Path, buffers: list[Any], *, durable: bool) -> None:
    """Write ``buffers`` to ``path`` with one ``writev``; durable: tmp, fsync, rename, dir fsync."""
    target = path.with_name(f".{path.name}.tmp") if durable else path
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        views = [memoryview(b).cast("B") for b in buffers]
        while views:  # a regular file takes it whole; loop all the same
            done = os.writev(fd, views)
            while views and done >= views[0].nbytes:
                done -= views.pop(0).nbytes
            if views:
                views[0] = views[0][done:]
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    if durable:
        os.replace(target, path)
        folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)


class ShardWriter:
    """The per-shard work of the limit, with one reusable cut buffer per thread."""

    def __init__(self, case: Case, volume: np.ndarray, *, durable: bool) -> None:
        import crc32c
        from numcodecs import Zstd  # type: ignore[import-untyped]

        self.case = case
        self.volume = volume
        self.durable = durable
        self.crc32c: Callable[[Any], int] = crc32c.crc32c
        self.zstd = Zstd(level=1, checksum=False) if case.codec == "zstd1" else None
        self.local = threading.local()
        self.per_shard = math.prod(s // c for s, c in zip(case.shards, case.chunks, strict=True))

    def _buffer(self) -> np.ndarray:
        """This thread's cut buffer: one chunk (zstd), or a whole shard's chunks (none)."""
        buffer: np.ndarray | None = getattr(self.local, "buffer", None)
        if buffer is None:
            n = 1 if self.zstd is not None else self.per_shard
            buffer = self.local.buffer = np.empty((n, *self.case.chunks), self.volume.dtype)
        return buffer

    def __call__(self, region: Region) -> int:
        """Cut, encode, checksum every chunk of the shard at ``region``; index; one writev."""
        case, crc = self.case, self.crc32c
        buffer = self._buffer()
        buffers: list[Any] = []
        entries = np.empty((self.per_shard, 2), dtype="<u8")
        offset = 0
        for i, chunk in enumerate(chunk_regions(region, case.chunks)):
            if self.zstd is not None:
                np.copyto(buffer[0], self.volume[chunk])
                encoded = self.zstd.encode(buffer[0])
            else:
                np.copyto(buffer[i], self.volume[chunk])
                encoded = buffer[i]
            n = memoryview(encoded).nbytes
            buffers += [encoded, crc(encoded).to_bytes(4, "little")]
            entries[i] = (offset, n + 4)
            offset += n + 4
        index = entries.tobytes()
        buffers += [index, crc(index).to_bytes(4, "little")]
        key = [str(r.start // n) for r, n in zip(region, case.shards, strict=True)]
        path = Path(case.target, "c", *key)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_file(path, buffers, durable=self.durable)
        return offset + len(index) + 4


def chunk_regions(region: Region, chunks: tuple[int, ...]) -> list[Region]:
    """The inner chunks of a shard region, in C order (the index's slot order)."""
    extent = tuple(r.stop - r.start for r in region)
    return [
        tuple(slice(r.start + c.start, r.start + c.stop) for r, c in zip(region, cell, strict=True))
        for cell in grid(extent, chunks)
    ]


def format_work(case: Case, volume: np.ndarray, *, durable: bool) -> tuple[Any, list[str]]:
    """The timed write of the format-work limit (see the module's docstring), and its notes."""
    aligned = all(
        n % s == 0 and s % c == 0
        for n, s, c in zip(case.shape, case.shards, case.chunks, strict=True)
    )
    if not aligned:
        raise ValueError("the format-work limit needs shards and chunks that tile the volume")
    metadata = array_metadata(case, volume.dtype)
    writer = ShardWriter(case, volume, durable=durable)
    regions = list(grid(case.shape, case.shards))

    def write() -> int:
        root = Path(case.target)
        root.mkdir(parents=True)
        write_file(root / "zarr.json", [metadata], durable=durable)
        with ThreadPoolExecutor(max_workers=THREADS) as pool:
            return sum(pool.map(writer, regions))

    how = "tmp + fsync + replace + directory fsync" if durable else "no fsync"
    codec = "numcodecs Zstd(level=1)" if case.codec == "zstd1" else "no compressor"
    return write, [
        f"{THREADS} threads, one task per shard: cut, {codec}, crc32c, index + crc32c, one "
        f"writev per shard, {how}"
    ]
