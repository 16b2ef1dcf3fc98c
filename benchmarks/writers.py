"""The writers under test and the three limits, as closures over a case, and their checks.

Each factory takes a :class:`~benchmarks.cases.Case` (its target, a local
directory or an ``s3://`` URL with storage options; its layout, codec and
``max_mem``) and the case's data (the NumPy volume, or a Dask array for the
writers that take blocks), does the untimed preparation, and returns the timed
write (a callable without arguments) and notes. Every Zarr output has the
volume's shape and dtype, ``case.shards`` of ``case.chunks``, inner codecs
bytes (little endian) then zstd level 1 or nothing (then, in shardpipe's, its
default chunk checksum crc32c), index bytes + crc32c at the end, fill value 0.

The limits write no Zarr array: ``encode`` only encodes, ``raw`` writes the
raw bytes plainly, ``raw-fsync`` writes files of the shards' encoded sizes
durably, as shardpipe publishes a shard.
"""

from __future__ import annotations

import functools
import os
import shutil
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from benchmarks.cases import Case
from benchmarks.format_limit import format_work
from benchmarks.volumes import DTYPES, Region, Volume, grid, synthetic_array

Write = Callable[[], object]
MIB = 1 << 20
THREADS = os.cpu_count() or 1
"""Worker threads of the limits, TensorStore's source and cubed: all cores."""
ZARRS_CONFIG = {
    "codec_pipeline.path": "zarrs.ZarrsCodecPipeline",
    # Raise instead of silently falling back to zarr-python's own pipeline.
    "codec_pipeline.strict": True,
}


class WriterUnsupported(RuntimeError):
    """The library cannot perform the requested write at all."""


def compressors(codec: str) -> Any:
    """``ZstdCodec(level=1)`` for ``zstd1``, None (no compression) for ``none``."""
    from zarr.codecs import ZstdCodec

    return {"zstd1": ZstdCodec(level=1), "none": None}[codec]


def create_array(case: Case, dtype: Any, **kwargs: Any) -> Any:
    """Create the empty sharded target with zarr-python (replacing what is there).

    ``kwargs`` go to ``zarr.create_array`` (``compressors`` replaces the case's codec).
    """
    import zarr

    kwargs.setdefault("compressors", compressors(case.codec))
    return zarr.create_array(
        case.target,
        storage_options=case.storage_options,
        shape=case.shape,
        dtype=dtype,
        chunks=case.chunks,
        shards=case.shards,
        overwrite=True,
        **kwargs,
    )


def inner_chunks(region: Region, chunks: tuple[int, ...]) -> Iterator[Region]:
    """Yield the inner chunks of a shard region, in absolute indices."""
    for local in grid(tuple(r.stop - r.start for r in region), chunks):
        yield tuple(
            slice(r.start + s.start, r.start + s.stop) for r, s in zip(region, local, strict=True)
        )


def chunk_bytes(chunk: np.ndarray) -> np.ndarray:
    """Apply the ``bytes`` codec (little endian, C order): a contiguous copy."""
    return np.ascontiguousarray(chunk, dtype=chunk.dtype.newbyteorder("<"))


def numcodecs_zstd(codec: str) -> Any:
    """The numcodecs codec zarr's ``ZstdCodec`` uses, or None for ``none``."""
    from numcodecs import Zstd  # type: ignore[import-untyped]

    return Zstd(level=1, checksum=False) if codec == "zstd1" else None


def encoded_size(case: Case, volume: np.ndarray, zstd: Any, region: Region) -> int:
    """Bytes of one shard's inner chunks after the case's codecs (no index)."""
    total = 0
    for chunk in inner_chunks(region, case.chunks):
        raw = chunk_bytes(volume[chunk])
        total += len(zstd.encode(raw)) if zstd else raw.nbytes
    return total


def encode_only(case: Case, volume: np.ndarray) -> tuple[Write, list[str]]:
    """Encode every inner chunk, one task per shard on a thread per core; keep only sizes."""
    zstd = numcodecs_zstd(case.codec)

    def write() -> int:
        with ThreadPoolExecutor(max_workers=THREADS) as pool:
            encode = functools.partial(encoded_size, case, volume, zstd)
            return sum(pool.map(encode, grid(case.shape, case.shards)))

    return write, [f"{THREADS} threads, per-shard tasks, no I/O"]


def raw_pieces(case: Case, volume: np.ndarray) -> list[memoryview]:
    """Cut the volume's bytes into one contiguous piece per shard (no copy)."""
    flat = memoryview(np.ascontiguousarray(volume)).cast("B")
    step = -(-flat.nbytes // case.n_shards)
    return [flat[start : start + step] for start in range(0, flat.nbytes, step)]


def raw_write(case: Case, volume: np.ndarray) -> tuple[Write, list[str]]:
    """Write the raw volume bytes to one file per shard with plain Python writes, no encoding."""
    pieces = raw_pieces(case, volume)
    path = Path(case.target)

    def put(index: int) -> None:
        with open(path / str(index), "wb") as out:
            out.write(pieces[index])

    def write() -> None:
        path.mkdir(parents=True)
        with ThreadPoolExecutor(max_workers=THREADS) as pool:
            list(pool.map(put, range(len(pieces))))

    return write, [f"{len(pieces)} files x {pieces[0].nbytes / MIB:.0f} MiB, no fsync"]


def shard_files(case: Case, volume: np.ndarray) -> list[tuple[Path, list[memoryview]]]:
    """Each shard's file (at its key ``c/i/j/k``) and the bytes it gets, as encoded as the case.

    The size is what the shard's object holds: its chunks after the case's
    codecs (numcodecs ``Zstd(level=1)`` for ``zstd1``, computed now, untimed)
    plus the index (16 bytes per chunk and a CRC32C). The bytes are the
    start of the shard's raw piece (:func:`raw_pieces`), zeros past its end.
    """
    regions = list(grid(case.shape, case.shards))
    zstd = numcodecs_zstd(case.codec)
    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        sizes = list(pool.map(functools.partial(encoded_size, case, volume, zstd), regions))
    files = []
    for region, encoded, piece in zip(regions, sizes, raw_pieces(case, volume), strict=True):
        size = encoded + 16 * len(list(inner_chunks(region, case.chunks))) + 4
        key = [str(r.start // n) for r, n in zip(region, case.shards, strict=True)]
        pad = memoryview(bytes(max(0, size - piece.nbytes)))
        files.append((Path(case.target, "c", *key), [piece[:size], pad]))
    return files


def fsync_dir(path: Path) -> None:
    """``fsync`` a directory (what makes a rename in it durable)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def raw_fsync_write(case: Case, volume: np.ndarray) -> tuple[Write, list[str]]:
    """Write each shard's encoded size of raw bytes durably, as shardpipe publishes a shard.

    Per shard, on a thread per core: create its directory if needed, write a
    temporary file beside it with ``os.writev``, ``os.fsync`` it, ``os.replace``
    it onto the shard's key, ``fsync`` the directory. No encoding is timed.
    """
    files = shard_files(case, volume)

    def put(index: int) -> None:
        final, buffers = files[index]
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.with_name(f".{final.name}.{index}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            views = [b for b in buffers if b.nbytes]
            while views:  # a regular file takes it in one call; loop all the same
                done = os.writev(fd, views)
                while views and done >= views[0].nbytes:
                    done -= views.pop(0).nbytes
                if views:
                    views[0] = views[0][done:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, final)
        fsync_dir(final.parent)

    def write() -> None:
        with ThreadPoolExecutor(max_workers=THREADS) as pool:
            list(pool.map(put, range(len(files))))

    total = sum(b.nbytes for _, buffers in files for b in buffers)
    share = total / (volume.nbytes or 1)
    return write, [
        f"{len(files)} files, {total / MIB:.1f} MiB in all ({share:.1%} of raw: the "
        f"{'zstd-1' if case.codec == 'zstd1' else 'raw'} shard sizes), tmp + fsync + replace + "
        f"directory fsync per file, {THREADS} threads"
    ]


def dask_to_zarr(
    case: Case, x: Any, config: dict[str, Any] | None = None
) -> tuple[Write, list[str]]:
    """``zarr.create_array`` (sharded) then ``dask.array.to_zarr(x, array)``.

    Into an existing sharded array ``to_zarr`` rechunks to "auto" blocks that
    are multiples of the shard shape, so every task writes whole shards.
    With ``config`` (zarr's configuration) the array must use the zarrs pipeline.
    """
    import dask.array as da
    import zarr

    def write() -> None:
        with zarr.config.set(config or {}):
            target = create_array(case, x.dtype)
            pipeline = type(target.async_array.codec_pipeline).__name__ if config else None
            if config and pipeline != "ZarrsCodecPipeline":
                raise RuntimeError(f"zarrs pipeline not active (got {pipeline})")
            da.to_zarr(x, target)

    auto = da.core.normalize_chunks(
        "auto", shape=case.shape, dtype=x.dtype, previous_chunks=case.shards
    )
    rechunk = tuple(c[0] for c in auto)
    return write, [f"{x.npartitions} input blocks; to_zarr rechunks to {rechunk}"]


def tensorstore_write(
    case: Case, volume: np.ndarray, *, crc: bool = False, fsync: bool = False
) -> tuple[Write, list[str]]:
    """TensorStore ``zarr3``: one write per shard region, all issued before any is awaited.

    No transaction (each write covers a whole shard). ``crc``: the inner
    chain ends with ``crc32c``, as shardpipe's (like with like, issue #30);
    ``fsync``: ``file_io_sync`` on (durable), else off.
    """
    import tensorstore as ts

    little = {"name": "bytes", "configuration": {"endian": "little"}}
    zstd = {"name": "zstd", "configuration": {"level": 1, "checksum": False}}
    checksum = [{"name": "crc32c"}] if crc else []
    sharding = {
        "chunk_shape": list(case.chunks),
        "codecs": [*([little, zstd] if case.codec == "zstd1" else [little]), *checksum],
        "index_codecs": [little, {"name": "crc32c"}],
        "index_location": "end",
    }
    metadata = {
        "shape": list(case.shape),
        "data_type": volume.dtype.name,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(case.shards)}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0,
        "codecs": [{"name": "sharding_indexed", "configuration": sharding}],
    }
    spec = {
        "driver": "zarr3",
        "kvstore": {"driver": "file", "path": case.target},
        "metadata": metadata,
        "context": {"file_io_sync": fsync},
    }
    regions = list(grid(case.shape, case.shards))

    def write() -> None:
        array = ts.open(spec, create=True, delete_existing=True).result()
        futures = [array[region].write(volume[region]) for region in regions]
        for future in futures:
            future.result()

    sync = "on" if fsync else "off"
    chain = ", crc32c after each inner chunk" if crc else ""
    return write, [f"{len(regions)} concurrent per-shard writes, file_io_sync {sync}{chain}"]


def cubed_store(case: Case, volume: np.ndarray) -> tuple[Write, list[str]]:
    """``cubed.store`` of ``cubed.from_array(volume, chunks=shards)`` into a zarr-python array.

    cubed's ``threads`` executor with one worker per core; its work directory
    is ``TARGET.scratch``.
    """
    import cubed

    spec = cubed.Spec(
        work_dir=f"{case.target}.scratch/cubed-work",
        allowed_mem="2GB",
        reserved_mem="100MB",
        executor_name="threads",
        executor_options={"max_workers": THREADS},
    )
    source = cubed.from_array(volume, chunks=case.shards, spec=spec)
    notes = [f"threads executor x{THREADS}, source chunks = shards"]

    def write() -> None:
        target = create_array(case, volume.dtype)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                cubed.store(source, target)
            except Exception as exc:
                raise WriterUnsupported(f"cubed.store into a sharded array: {exc!r}") from exc
        for w in caught:
            spurious = "mismatch between the shard and chunk size" in str(w.message)
            suffix = " (spurious: source chunks already equal the shards)" if spurious else ""
            if f"warning: {w.message}{suffix}" not in notes:
                notes.append(f"warning: {w.message}{suffix}")

    return write, notes


def shardpipe_args(case: Case) -> dict[str, Any]:
    """Keyword arguments of ``to_sharded_zarr``/``prepare_write`` for the case.

    ``chunk_checksums=True`` is shardpipe's default, spelled out: a ``crc32c``
    (4 bytes) ends each inner chunk, which no other writer here adds.
    """
    return {
        "shards": case.shards,
        "chunks": case.chunks,
        "compressors": compressors(case.codec),
        "chunk_checksums": True,
        "overwrite": True,
        "storage_options": case.storage_options,
        **({"max_mem": case.max_mem} if case.max_mem else {}),
    }


def shardpipe_write(case: Case, x: Any, fsync: bool = True) -> tuple[Write, list[str]]:
    """``shardpipe.to_sharded_zarr`` on the Dask array; ``fsync=False`` is atomic, not durable."""
    import shardpipe

    kwargs = shardpipe_args(case)
    if not fsync:
        kwargs["storage_options"] = {**(case.storage_options or {}), "fsync": False}
    write = lambda: shardpipe.to_sharded_zarr(x, case.target, **kwargs)  # noqa: E731
    return write, [f"{x.npartitions} input blocks, chunk checksums (crc32c) on"]


def plan_note(case: Case, x: Any) -> str:
    """Describe shardpipe's plan of the write (``prepare_write`` writes nothing)."""
    import shardpipe

    plan = shardpipe.prepare_write(x, case.target, **shardpipe_args(case)).plan
    tasks = ", ".join(f"{kind} {n}" for kind, n in sorted(plan.task_counts.items()))
    return (
        f"plan: {plan.n_shards} shards, {plan.n_multipart_shards} in parts ({plan.n_parts} "
        f"parts of up to {plan.part_chunks} inner chunks); {plan.num_tasks} tasks ({tasks}); "
        f"projected peak per task {plan.max_projected_mem / MIB:.1f} MiB"
    )


def _nbytes(block: np.ndarray) -> np.ndarray:
    """``map_blocks`` callback of ``generate``: keep only the block's size."""
    return np.full((1,) * block.ndim, block.nbytes, dtype=np.int64)


def generate(case: Case, x: Any) -> tuple[Write, list[str]]:
    """Compute every block of the Dask array and drop it (the generation cost alone)."""
    sizes = x.map_blocks(_nbytes, chunks=tuple((1,) * len(c) for c in x.chunks), dtype="i8")
    return lambda: int(sizes.sum().compute()), []


def warm_up(case: Case) -> None:
    """Write a tiny two-part shard with shardpipe (imports, thread pools, codec contexts)."""
    import shardpipe

    path = f"{case.target}.warm-up"
    x = synthetic_array((64, 128, 128), "uint8", (64, 64, 128))
    shardpipe.to_sharded_zarr(x, path, chunks=(64, 64, 64), max_mem="2MB", overwrite=True)
    shutil.rmtree(path)


def check_zarr(case: Case, vol: Volume, written: object) -> tuple[int, list[str]]:
    """Read a Zarr output back with zarr-python's default pipeline and compare it.

    Checks format, shape, dtype, shards, inner chunks, compressors (zstd or
    none, then shardpipe's crc32c in its outputs), one object per shard, the
    values of ``vol.regions``, and (with ``case.shardpipe_checks``)
    ``shardpipe.verify``. Returns the bytes stored and the problems found.
    """
    import fsspec
    import zarr

    arr = zarr.open_array(case.target, mode="r", storage_options=case.storage_options)
    got = (arr.metadata.zarr_format, arr.shape, arr.dtype, arr.shards, arr.chunks)
    want = (3, case.shape, DTYPES[case.volume], case.shards, case.chunks)
    problems = [] if got == want else [f"layout {got}, expected {want}"]
    codecs = [(type(c).__name__, getattr(c, "level", None)) for c in arr.compressors]
    want_codecs: list[tuple[str, int | None]] = [("ZstdCodec", 1)] if case.codec == "zstd1" else []
    if case.writer in CHECKSUMMED:  # chunk_checksums=True (shardpipe_args), or the same chain
        want_codecs.append(("Crc32cCodec", None))
    if codecs != want_codecs:
        problems.append(f"compressors {arr.compressors}")
    fs, path = fsspec.url_to_fs(case.target, **(case.storage_options or {}))
    n_objects = len(fs.find(f"{path}/c"))
    if n_objects != case.n_shards:
        problems.append(f"{n_objects} shard objects, expected {case.n_shards}")
    for region in vol.regions:
        got_values, want_values = arr[region], vol.values(region)
        if not np.array_equal(got_values, want_values):
            where = ", ".join(f"{s.start}:{s.stop}" for s in region)
            n_bad = int(np.count_nonzero(got_values != want_values))
            problems.append(f"[{where}]: {n_bad} values differ")
    if case.shardpipe_checks:
        import shardpipe

        report = shardpipe.verify(case.target, storage_options=case.storage_options)
        problems += [f"verify {key}: {problem}" for key, problem in report.problems[:5]]
    return int(fs.du(path)), problems


def check_encoded(case: Case, vol: Volume, written: object) -> tuple[int, list[str]]:
    """Round-trip every chunk and compare the encoded total with the timed run's."""
    zstd = numcodecs_zstd(case.codec)
    total, problems = 0, []
    for region in grid(case.shape, case.shards):
        for chunk in inner_chunks(region, case.chunks):
            raw = chunk_bytes(vol.data[chunk])
            encoded = zstd.encode(raw) if zstd else raw
            total += len(encoded) if zstd else raw.nbytes
            decoded = np.frombuffer(zstd.decode(encoded), raw.dtype) if zstd else raw
            if not np.array_equal(decoded.reshape(raw.shape), raw):
                problems.append(f"chunk {chunk} does not round-trip")
    if total != written:
        problems.append(f"timed run encoded {written} bytes, verification pass {total}")
    return total, problems


def check_raw(case: Case, vol: Volume, written: object) -> tuple[int, list[str]]:
    """Read every file back and compare it with its piece of the volume."""
    total, problems = 0, []
    for index, piece in enumerate(raw_pieces(case, vol.data)):
        data = (Path(case.target) / str(index)).read_bytes()
        total += len(data)
        if data != piece:
            problems.append(f"file {index} differs from the volume")
    return total, problems


def check_raw_fsync(case: Case, vol: Volume, written: object) -> tuple[int, list[str]]:
    """Read every shard file back and compare it with its bytes; no temporary file may remain."""
    total, problems = 0, []
    for final, buffers in shard_files(case, vol.data):
        data = final.read_bytes() if final.is_file() else None
        total += len(data or b"")
        if data != b"".join(buffers):
            problems.append(f"{final.relative_to(case.target)} differs from its bytes")
    n_files = sum(len(files) for _, _, files in os.walk(case.target))
    if n_files != case.n_shards:
        problems.append(f"{n_files} files, expected {case.n_shards}")
    return total, problems


CHECKSUMMED = (
    "shardpipe",
    "shardpipe-nofsync",
    "format",
    "format-fsync",
    "tensorstore-crc",
    "tensorstore-crc-fsync",
)
"""Writers whose inner chunks end with a ``crc32c`` (shardpipe's default chain)."""


class Writer(NamedTuple):
    """A writer: the modules it needs, its factory, and the check of its output."""

    needs: tuple[str, ...]
    make: Callable[[Case, Any], tuple[Write, list[str]]]
    check: Callable[[Case, Volume, object], tuple[int, list[str]]] | None = check_zarr


WRITERS = {
    "encode": Writer(("numcodecs",), encode_only, check_encoded),
    "raw": Writer((), raw_write, check_raw),
    "raw-fsync": Writer(("numcodecs",), raw_fsync_write, check_raw_fsync),
    "dask": Writer(("dask.array", "zarr"), dask_to_zarr),
    "zarrs": Writer(("dask.array", "zarr", "zarrs"), lambda c, x: dask_to_zarr(c, x, ZARRS_CONFIG)),
    "tensorstore": Writer(("tensorstore",), tensorstore_write),
    "tensorstore-crc": Writer(
        ("tensorstore",), lambda c, v: tensorstore_write(c, v, crc=True, fsync=False)
    ),
    "tensorstore-crc-fsync": Writer(
        ("tensorstore",), lambda c, v: tensorstore_write(c, v, crc=True, fsync=True)
    ),
    "format": Writer(("numcodecs", "crc32c"), lambda c, v: format_work(c, v, durable=False)),
    "format-fsync": Writer(("numcodecs", "crc32c"), lambda c, v: format_work(c, v, durable=True)),
    "cubed": Writer(("cubed", "zarr"), cubed_store),
    "shardpipe": Writer(("dask.array", "zarr", "shardpipe"), shardpipe_write),
    "shardpipe-nofsync": Writer(
        ("dask.array", "zarr", "shardpipe"), lambda c, x: shardpipe_write(c, x, fsync=False)
    ),
    "generate": Writer(("dask.array",), generate, None),
}
"""Every writer by name (the suite's are :data:`benchmarks.cases.SUITE_WRITERS`)."""
