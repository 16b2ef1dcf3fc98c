"""The rechunk limit: the work any rechunk of a case must do, each part timed alone.

Like the format-work limit of :mod:`benchmarks.format_limit`, but for a
rechunk, whose source must be read and decoded too. On one thread, in turn:

1. **read** every chunk file of the Zarr v2 source once (``open``/``read``);
2. **decode** each with numcodecs ``Zstd`` into its place in one array the
   size of the source (the chunks of every case are whole planes, contiguous
   in it, so this is the decoder's own copy);
3. **cut** each inner chunk of the target out of that array into a
   contiguous buffer (padded with the fill value at the array's edges);
4. **encode** it with numcodecs ``Zstd(level=1)``;
5. **checksum** it (CRC32C of the encoded bytes) and, per shard, the index;
6. **write** each shard with one ``os.writev`` of its chunks, their
   checksums and its index, at its key, no fsync (as every writer here).

Between steps 2 and 3 the limit also times what a two-pass rechunk adds at
the least, on the array it decoded (:func:`copy_parts`), kept apart from the
parts above: **copy_write** writes it raw into scratch files of whole planes,
32 MiB or the nearest whole plane (one ``write`` each, from the array's own
memory: no cut, no codec), **copy_read** gathers every target shard's region
back from them through ``mmap`` (what the second pass must bring back into
memory, with no read call per chunk), **copy_remove** deletes them. Their sum
over the cores, added to the limit, is the *two-pass limit*: what a rechunk
whose budget forces an intermediate copy costs at the least.

Inner chunks wholly outside the array are left out (an empty index entry),
as zarr-python does. Each part is timed on its own (``perf_counter`` around
it, per file, per chunk or per shard); the limit is the sum of the parts
divided by the cores: what a writer that kept every core busy with nothing
but this work would take. The output is a real sharded array (its
``zarr.json`` too), read back and compared like every writer's.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.format_limit import write_file
from benchmarks.rechunk_cases import RechunkCase, regions, target_metadata

PARTS = ("read", "decode", "cut", "encode", "checksum", "write")
COPY_PARTS = ("copy_write", "copy_read", "copy_remove")
COPY_FILE_BYTES = 32 * 2**20
"""The size the scratch files of :func:`copy_parts` hold, in whole planes (at least one)."""
EMPTY = 2**64 - 1
"""Offset and length of an index entry whose chunk is not stored."""


def read_source(case: RechunkCase, source: Path, seconds: dict[str, float]) -> np.ndarray:
    """Steps 1 and 2: every chunk file read, then decoded into one array."""
    from numcodecs import Zstd  # type: ignore[import-untyped]

    if any(c != n for c, n in zip(case.source_chunks[1:], case.shape[1:], strict=True)):
        raise ValueError("the rechunk limit reads sources chunked in whole planes only")
    depth = case.source_chunks[0]
    keys = [str(z // depth) + ".0" * (len(case.shape) - 1) for z in range(0, case.shape[0], depth)]
    start = time.perf_counter()
    encoded = []
    for key in keys:
        with open(source / key, "rb") as file:
            encoded.append(file.read())
    seconds["read"] += time.perf_counter() - start
    array = np.empty(case.shape, case.dtype)
    zstd = Zstd()
    start = time.perf_counter()
    for z, data in zip(range(0, case.shape[0], depth), encoded, strict=True):
        planes = array[z : z + depth]
        if planes.shape[0] == depth:
            zstd.decode(data, out=planes)
        else:  # a last chunk past the array's end: decode whole, keep the part inside
            whole = np.empty(case.source_chunks, case.dtype)
            zstd.decode(data, out=whole)
            planes[...] = whole[: planes.shape[0]]
    seconds["decode"] += time.perf_counter() - start
    return array


def copy_parts(
    case: RechunkCase, array: np.ndarray, scratch: Path, seconds: dict[str, float]
) -> None:
    """What a copy adds: ``array`` written raw, every shard's region read back, removed."""
    plane = array[0].nbytes
    depth = max(1, COPY_FILE_BYTES // plane)
    scratch.mkdir(parents=True)
    paths = []
    start = time.perf_counter()
    for z in range(0, case.shape[0], depth):
        path = scratch / str(z)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, memoryview(array[z : z + depth]).cast("B"))
        finally:
            os.close(fd)
        paths.append((z, path))
    seconds["copy_write"] += time.perf_counter() - start
    start = time.perf_counter()
    for z, path in paths:
        planes = np.memmap(path, dtype=array.dtype, mode="r", shape=array[z : z + depth].shape)
        for shard in regions(case.shape, case.shards):
            low, high = max(shard[0].start, z), min(shard[0].stop, z + planes.shape[0])
            if low < high:  # the shard's region within these planes, brought back
                region = (slice(low, high), *shard[1:])
                array[region] = planes[(slice(low - z, high - z), *shard[1:])]
        del planes
    seconds["copy_read"] += time.perf_counter() - start
    start = time.perf_counter()
    for _, path in paths:
        path.unlink()
    scratch.rmdir()
    seconds["copy_remove"] += time.perf_counter() - start


def write_shards(
    case: RechunkCase, array: np.ndarray, target: Path, seconds: dict[str, float]
) -> int:
    """Steps 3 to 6 for every shard; the bytes stored."""
    import crc32c
    from numcodecs import Zstd

    crc: Callable[[Any], int] = crc32c.crc32c
    zstd = Zstd(level=1, checksum=False)
    buffer = np.zeros(case.chunks, case.dtype)
    per_shard = [s // c for s, c in zip(case.shards, case.chunks, strict=True)]
    stored = 0
    clock = time.perf_counter
    for shard in regions(case.shape, case.shards):
        buffers: list[Any] = []
        entries = np.full((math.prod(per_shard), 2), EMPTY, dtype="<u8")
        offset = 0
        for slot, cell in enumerate(np.ndindex(*per_shard)):
            corner = [r.start + i * c for r, i, c in zip(shard, cell, case.chunks, strict=True)]
            if any(a >= n for a, n in zip(corner, case.shape, strict=True)):
                continue  # wholly outside the array: not stored
            chunk = tuple(
                slice(a, min(a + c, n))
                for a, c, n in zip(corner, case.chunks, case.shape, strict=True)
            )
            inside = tuple(slice(0, r.stop - r.start) for r in chunk)
            t0 = clock()
            if any(s.stop != c for s, c in zip(inside, case.chunks, strict=True)):
                buffer.fill(0)
            buffer[inside] = array[chunk]
            t1 = clock()
            encoded = zstd.encode(buffer)
            t2 = clock()
            checksum = crc(encoded).to_bytes(4, "little")
            seconds["cut"] += t1 - t0
            seconds["encode"] += t2 - t1
            seconds["checksum"] += clock() - t2
            n = memoryview(encoded).nbytes + 4
            buffers += [encoded, checksum]
            entries[slot] = (offset, n)
            offset += n
        t0 = clock()
        index = entries.tobytes()
        buffers += [index, crc(index).to_bytes(4, "little")]
        t1 = clock()
        key = [str(r.start // s) for r, s in zip(shard, case.shards, strict=True)]
        path = target.joinpath("c", *key)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_file(path, buffers, durable=False)
        seconds["checksum"] += t1 - t0
        seconds["write"] += clock() - t1
        stored += offset + len(index) + 4
    return stored


def rechunk_limit(case: RechunkCase, source: Path, target: Path) -> dict[str, Any]:
    """Run the limit once into ``target``; its parts' seconds, their sum and the limit."""
    seconds = dict.fromkeys(PARTS, 0.0)
    target.mkdir(parents=True)
    (target / "zarr.json").write_text(json.dumps(target_metadata(case), indent=2))
    array = read_source(case, source, seconds)
    copy_seconds = dict.fromkeys(COPY_PARTS, 0.0)
    copy_parts(case, array, target.with_name(target.name + ".copy"), copy_seconds)
    stored = write_shards(case, array, target, seconds)
    cores = os.cpu_count() or 1
    total = sum(seconds.values())
    return {
        "parts_s": seconds,
        "copy_parts_s": copy_seconds,
        "one_thread_s": total,
        "cores": cores,
        "limit_s": total / cores,
        "two_pass_limit_s": (total + sum(copy_seconds.values())) / cores,
        "stored_bytes": stored,
    }
