"""Decompression bombs: every one fails fast, within memory, with a ShardpipeError naming sizes.

Issue 28 measured a 495 KB shard whose gzip'd minishard index inflated to
2.7 GB in ``verify``, a 510 KB ``.gz`` chunk file to 1.1 GB, and a 510 KB
zarr gzip chunk to 1.1 GB in ``verify`` and in a region write. Each case
here plants a bomb (512 MiB of zeros in about 510 KB of gzip, or a header
that declares gigabytes) where a writer would put a small chunk or index,
then runs the command in a child process (forked from the fork server, shardpipe
imported) that reports its time and the growth of its peak RSS (``VmHWM``, reset at
its start: ``ru_maxrss`` would include the fork server's peak): each must end in a
``ShardpipeError`` naming the file and the sizes, in under 2 s and 256 MB (the
Done-when of issue 28; the bounds below are that, the timing with slack for a loaded
machine).

Issue 39 measured a 3 GiB sparse chunk file of an OME-Zarr 0.4 source read
whole by ``convert_ome_zarr`` (6.3 GiB RSS, 75 s): a file larger than its
chunk can be through its codecs, or a metadata document past 16 MiB, is
refused the same way, unread.
Issue 39 added numcodecs' bz2, lzma and lz4 chunks and ``numcodecs.zstd``
(23 KB of bz2, 147 KB of xz, 16 KB of zstd RLE blocks and a 2.1 MB LZ4 block,
each 512 MiB; an LZ4 header claiming 4 GiB), and a rechunk's source, which
zarr-python read and decoded (+530 MiB to +1,049 MiB of peak RSS before the fix). A
rechunk names the shard and the inner chunk; a Zarr v2 source names the
chunk's key; a chunk object larger than its codecs can make is refused
having read one byte more than it may hold.
"""

from __future__ import annotations

import json
import os
import zlib
from pathlib import Path
from typing import Any

import crc32c
import numpy as np
import pytest
import zarr

import shardpipe
from shardpipe.formats.base import assemble_shard
from shardpipe.storage.resolve import resolve_store
from shardpipe.stored.metadata import format_of, open_array_metadata
from tests.support.fork_server import ForkServer

BOMB_NBYTES = 512 << 20
MOST_SECONDS = 2.0
MOST_RSS_MIB = 256

CHILD = r"""
import json, resource, sys, time, warnings
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))  # the old code: MemoryError, no swap
warnings.simplefilter("ignore")
import numpy as np
import shardpipe
from shardpipe.errors import ShardpipeError

case, path = sys.argv[1], sys.argv[2]

def run():
    if case in ("verify", "info"):
        return str(getattr(shardpipe, case)(path))
    if case == "region":
        shardpipe.to_sharded_zarr(
            np.ones((10, 10, 10), dtype="uint8"), path, region=(slice(0, 10),) * 3
        )
        return "written"
    if case in ("convert", "convert-reencoded"):
        shardpipe.convert_ome_zarr(path, path + ".v05", reencode=case == "convert-reencoded")
        return "converted"
    if case == "rechunk":  # the source read through zarr-python, by Dask tasks
        shardpipe.rechunk(path, path + "-rechunked", shards=(64, 64, 64), chunks=(32, 32, 32))
        return "written"
    raise ValueError(case)

def status(field):  # MiB; VmHWM, not ru_maxrss, which keeps the fork server's peak
    with open("/proc/self/status") as lines:
        line = next(l for l in lines if l.startswith(field + ":"))
    return int(line.split()[1]) / 1024

def peak():
    return status("VmHWM")

with open("/proc/self/clear_refs", "w") as clear:
    clear.write("5")  # VmHWM := VmRSS: from here, the peak of this child alone
before = status("VmRSS")  # the peak after, less the RSS now: the growth
start = time.perf_counter()
try:
    outcome = {"returned": run()}
except ShardpipeError as err:
    outcome = {"error": type(err).__name__, "message": str(err)}
except BaseException as err:  # anything else is a finding
    outcome = {"raw": type(err).__name__, "message": str(err)[:500]}
outcome["seconds"] = time.perf_counter() - start
outcome["rss_mib"] = peak() - before
print(json.dumps(outcome))
"""


def run_child(server: ForkServer, case: str, path: Path) -> dict[str, Any]:
    """Run ``case`` on ``path`` in a forked child; its outcome, seconds and RSS growth."""
    child = server.start(None, [case, str(path)], code=CHILD)
    assert child.wait(timeout=300) == 0, child.stderr()[-3000:]
    outcome: dict[str, Any] = json.loads(child.stdout().strip().splitlines()[-1])
    return outcome


def assert_refused_fast(
    outcome: dict[str, Any], *words: str, most_seconds: float = MOST_SECONDS
) -> str:
    """The outcome is a ShardpipeError (or a report) naming ``words``, fast and small."""
    message = outcome.get("message") or outcome.get("returned", "")
    assert "raw" not in outcome, outcome
    for word in words:
        assert word in message, (word, outcome)
    assert outcome["seconds"] < most_seconds, outcome
    assert outcome["rss_mib"] < MOST_RSS_MIB, outcome
    return str(message)


@pytest.fixture(scope="module")
def gzip_bomb() -> bytes:
    """512 MiB of zeros as one gzip member (about 510 KB)."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = bytes(1 << 20)
    parts = [deflate.compress(zeros) for _ in range(BOMB_NBYTES >> 20)]
    return b"".join([*parts, deflate.flush()])


# -- zarr inner chunks ----------------------------------------------------------------------------
def _zarr_with_bomb(path: Path, compressors: Any, chunk: bytes) -> Path:
    """A 128^3 uint8 array in one shard of 64^3 chunks; inner chunk 0 replaced by ``chunk``."""
    data = np.arange(128**3, dtype="uint32").reshape(128, 128, 128).astype("uint8")
    shardpipe.to_sharded_zarr(
        data, str(path), shards=(128, 128, 128), chunks=(64, 64, 64), compressors=compressors
    )
    metadata = open_array_metadata(resolve_store(str(path)))
    names = [c.to_dict()["name"] for c in metadata.codecs[0].codecs]  # type: ignore[attr-defined]
    if names[-1] == "crc32c":  # chunk checksums: the bomb sits under a valid CRC32C
        chunk += crc32c.crc32c(chunk).to_bytes(4, "little")
    fmt = format_of(metadata)
    shard = path / "c" / "0" / "0" / "0"
    raw = shard.read_bytes()
    index, _ = fmt.read_index(lambda a, b: raw[a:b], len(raw), shard=(0, 0, 0))
    chunks = [
        (slot, raw[int(a) : int(a) + int(n)])
        for slot, (a, n) in enumerate(index.entries.tolist())
        if slot
    ]
    shard.write_bytes(
        b"".join(bytes(b) for b in assemble_shard(fmt, [(0, chunk), *chunks], shard=(0, 0, 0)))
    )
    return path


@pytest.mark.parametrize("case", ["verify", "region"])
def test_a_zarr_gzip_chunk_bomb(
    fork_server: ForkServer, tmp_path: Path, gzip_bomb: bytes, case: str
) -> None:
    path = _zarr_with_bomb(tmp_path / "a.zarr", zarr.codecs.GzipCodec(), gzip_bomb)
    shard = (path / "c" / "0" / "0" / "0").read_bytes()
    outcome = run_child(fork_server, case, path)
    message = assert_refused_fast(outcome, "c/0/0/0", "262,144 bytes expected")
    assert "inflate to more than" in message, message
    if case == "region":
        assert outcome["error"] == "ChunkDecodeError", outcome
        assert (path / "c" / "0" / "0" / "0").read_bytes() == shard  # left as it was


def test_a_zarr_zlib_chunk_bomb(fork_server: ForkServer, tmp_path: Path) -> None:
    from zarr.codecs.numcodecs import Zlib

    deflate = zlib.compressobj(9)
    bomb = b"".join([deflate.compress(bytes(1 << 20)) for _ in range(256)] + [deflate.flush()])
    path = _zarr_with_bomb(tmp_path / "z.zarr", Zlib(level=1), bomb)
    assert_refused_fast(
        run_child(fork_server, "verify", path), "c/0/0/0", "zlib data inflate to more than"
    )


def test_a_blosc_header_declaring_gigabytes(fork_server: ForkServer, tmp_path: Path) -> None:
    from numcodecs import Blosc

    frame = bytearray(Blosc().encode(np.zeros(64**3, dtype="uint8")))
    frame[4:8] = (3 << 30).to_bytes(4, "little")  # declares 3 GiB decoded
    path = _zarr_with_bomb(tmp_path / "b.zarr", zarr.codecs.BloscCodec(), bytes(frame))
    assert_refused_fast(
        run_child(fork_server, "verify", path), "c/0/0/0", "declares 3,221,225,472 decoded"
    )


def _lz4_block(nbytes: int) -> bytes:
    """An LZ4 block of ``nbytes`` zeros: a literal zero, a match repeating it, 5 literals."""
    extension, rest = divmod(nbytes - 6 - 4 - 15, 255)  # the match's length past 4 + 15
    match = bytes([0x1F, 0]) + (1).to_bytes(2, "little") + b"\xff" * extension + bytes([rest])
    return match + bytes([0x50]) + bytes(5)  # LZ4 ends on at least 5 literals


def _zstd_rle_frame(nbytes: int) -> bytes:
    """A zstd frame of ``nbytes`` zeros in RLE blocks of 128 KiB, declaring no content size."""
    block = 128 << 10
    count = nbytes // block
    header = (0xFD2FB528).to_bytes(4, "little") + bytes([0x00, 0x38])  # window of 128 KiB
    blocks = (
        ((i == count - 1) | 1 << 1 | block << 3).to_bytes(3, "little") + b"\0" for i in range(count)
    )
    return header + b"".join(blocks)


def _numcodecs_bomb(kind: str) -> tuple[Any, bytes]:
    """The zarr v3 numcodecs codec ``kind``, and a chunk inflating to 512 MiB (or saying so)."""
    import bz2
    import lzma

    from zarr.codecs import numcodecs as wrapped

    if kind == "bz2":  # 512 bzip2 streams of 1 MiB of zeros: 23 KB
        return wrapped.BZ2(level=1), bz2.compress(bytes(1 << 20), 9) * (BOMB_NBYTES >> 20)
    if kind == "lzma":  # 512 xz streams of 1 MiB of zeros: 147 KB
        return wrapped.LZMA(), lzma.compress(bytes(1 << 20), preset=0) * (BOMB_NBYTES >> 20)
    if kind == "lz4":  # what numcodecs writes: the decoded size, then the block (2.1 MB)
        return wrapped.LZ4(), BOMB_NBYTES.to_bytes(4, "little") + _lz4_block(BOMB_NBYTES)
    if kind == "lz4 claiming 4 GiB":
        return wrapped.LZ4(), (2**32 - 1).to_bytes(4, "little") + _lz4_block(64**3)
    if kind == "numcodecs.zstd":  # 16 KB
        return wrapped.Zstd(), _zstd_rle_frame(BOMB_NBYTES)
    raise ValueError(kind)


NUMCODECS_BOMBS = {
    "bz2": "bytes of bz2 data inflate to more than the 262,144 bytes expected",
    "lzma": "bytes of lzma data inflate to more than the 262,144 bytes expected",
    "lz4": "the lz4 header declares 536,870,912 decoded bytes, the 262,144 expected",
    "lz4 claiming 4 GiB": "the lz4 header declares 4,294,967,295 decoded bytes, the 262,144",
    "numcodecs.zstd": "zstd blocks hold at least 536870912 bytes of content, the chunk holds",
}


@pytest.mark.parametrize(
    ("kind", "case"),
    [(kind, "verify") for kind in sorted(NUMCODECS_BOMBS)]
    + [(kind, "rechunk") for kind in ("bz2", "lzma", "lz4", "lz4 claiming 4 GiB")],
)
def test_a_numcodecs_chunk_bomb(
    fork_server: ForkServer, tmp_path: Path, kind: str, case: str
) -> None:
    """bz2, lzma, lz4 and numcodecs' zstd (zarr v3's ``numcodecs.*``), in verify and as a
    rechunk's source (the inner chunk named by its shard and its place in it)."""
    codec, bomb = _numcodecs_bomb(kind)
    path = _zarr_with_bomb(tmp_path / "n.zarr", codec, bomb)
    outcome = run_child(fork_server, case, path)
    words = NUMCODECS_BOMBS[kind]
    if case == "rechunk" and len(bomb) > 265_220:  # more than a chunk can be: not decoded
        words = "holds more than the 265,220 bytes its codecs can make"
    message = assert_refused_fast(outcome, "c/0/0/0", words)
    if case == "rechunk":
        assert outcome["error"] == "ChunkDecodeError", outcome
        assert "c/0/0/0: inner chunk (0, 0, 0): " in message, message


def _v2_with_bomb(path: Path, compressor: Any, chunk: bytes, *, dtype: str = "uint8") -> Path:
    """A Zarr v2 array of 128^3 in chunks of 64^3 (``compressor``); chunk 0.0.0 is ``chunk``."""
    data = np.arange(128**3, dtype="uint32").reshape(128, 128, 128).astype(dtype)
    array = zarr.create_array(
        str(path),
        shape=data.shape,
        chunks=(64, 64, 64),
        dtype=dtype,
        zarr_format=2,
        compressors=compressor,
        fill_value=0,
    )
    array[...] = data
    (path / "0.0.0").write_bytes(chunk)
    return path


@pytest.mark.parametrize("kind", ["bz2", "zlib"])
def test_a_zarr_v2_chunk_bomb_in_a_rechunk_source(
    fork_server: ForkServer, tmp_path: Path, kind: str
) -> None:
    """A Zarr v2 source whose chunk 0.0.0 (bz2: 512 MiB, zlib: 256 MiB) inflates."""
    import bz2

    from numcodecs import BZ2, Zlib

    compressor, bomb = {
        "bz2": (BZ2(1), bz2.compress(bytes(1 << 20), 9) * (BOMB_NBYTES >> 20)),
        "zlib": (Zlib(1), _zlib_bomb(BOMB_NBYTES // 2)),  # less than a chunk can be
    }[kind]
    path = _v2_with_bomb(tmp_path / "v2.zarr", compressor, bomb)
    outcome = run_child(fork_server, "rechunk", path)
    assert_refused_fast(outcome, "0.0.0", f"{kind} data inflate to more than the 262,144")
    assert outcome["error"] == "ChunkDecodeError", outcome


def _zlib_bomb(nbytes: int) -> bytes:
    """``nbytes`` zeros (a multiple of 1 MiB) as one zlib stream."""
    deflate = zlib.compressobj(9)
    zeros = bytes(1 << 20)
    return b"".join([*(deflate.compress(zeros) for _ in range(nbytes >> 20)), deflate.flush()])


def test_a_stored_chunk_larger_than_its_codecs_can_make(
    fork_server: ForkServer, tmp_path: Path
) -> None:
    """A v2 chunk object of 512 MiB (no compressor: 262,144 bytes expected) is refused
    having read one byte more than a chunk can hold, not 512 MiB."""
    path = _v2_with_bomb(tmp_path / "big.zarr", None, b"")
    with open(path / "0.0.0", "wb") as chunk:
        chunk.truncate(BOMB_NBYTES)  # sparse: no disk space taken
    outcome = run_child(fork_server, "rechunk", path)
    assert_refused_fast(outcome, "0.0.0", "more than the 262,144")
    assert outcome["error"] == "ChunkDecodeError", outcome


# -- OME-Zarr 0.4 sources -------------------------------------------------------------------------
SIZE = "holds 3,221,225,472 bytes, more than the"
"""The message where the file's size was read (through zarr, a ranged read: no size)."""


NOT_READ = "no more than that was read"
"""Where a copied chunk or a document is refused having read no byte past its bound."""


@pytest.mark.parametrize(
    ("case", "key", "error", "words"),
    [
        ("convert", "0/0/0", "InvalidArgumentError", [SIZE, NOT_READ, "1,153 bytes a chunk"]),
        # decoded and written again: read as a rechunk reads its source, one byte past the bound
        (
            "convert-reencoded",
            "0/0/0",
            "ChunkDecodeError",
            ["holds more than the 1,153 bytes its codecs can make of a chunk of shape (8, 8)"],
        ),
        ("convert", "labels/mask/1/0/0", "InvalidArgumentError", [SIZE, NOT_READ, "64 bytes"]),
        ("convert", ".zattrs", "InvalidArgumentError", [SIZE, NOT_READ, "16,777,216 bytes"]),
        (
            "convert",
            "labels/mask/0/.zarray",
            "InvalidArgumentError",
            [SIZE, NOT_READ, "16,777,216 bytes a metadata document"],
        ),
    ],
)
def test_an_oversized_file_of_an_ome_source(
    fork_server: ForkServer, tmp_path: Path, case: str, key: str, error: str, words: list[str]
) -> None:
    """A 3 GiB sparse file where a source holds a chunk or a document: refused by key, no byte
    past its bound read."""
    from tests.hostile.ome_sources import build, documents

    source = tmp_path / "v04"
    build(source, documents())
    os.truncate(source / key, 3 << 30)  # sparse: costs no disk
    outcome = run_child(fork_server, case, source)
    assert outcome.get("error") == error, outcome
    # a conversion starts its tasks before the chunk is reached: 1-2 s on a loaded machine
    assert_refused_fast(outcome, key, *words, most_seconds=10.0)


# -- precomputed volumes --------------------------------------------------------------------------
SHARDING = {
    "@type": "neuroglancer_uint64_sharded_v1",
    "preshift_bits": 2,
    "hash": "identity",
    "minishard_bits": 2,
    "shard_bits": 3,
    "minishard_index_encoding": "gzip",
    "data_encoding": "gzip",
}


def _volume(path: Path) -> Path:
    """32 x 32 x 16 uint16 in 8^3 chunks (1,024 bytes each), identity shards of 16 chunks."""
    data = np.arange(32 * 32 * 16, dtype="uint16").reshape(32, 32, 16)
    shardpipe.to_neuroglancer_precomputed(
        data, path, resolution=(1, 1, 1), chunk_size=(8, 8, 8), sharding=SHARDING
    )
    return path


@pytest.mark.parametrize("case", ["verify", "info"])
def test_a_gzip_minishard_index_bomb(
    fork_server: ForkServer, tmp_path: Path, gzip_bomb: bytes, case: str
) -> None:
    """A 510 KB shard file whose first minishard index inflates to 512 MiB."""
    from shardpipe.formats.precomputed import PrecomputedSharding

    path = _volume(tmp_path / "vol")
    spec = PrecomputedSharding.from_json(SHARDING)
    index = np.zeros((1 << spec.minishard_bits, 2), dtype="<u8")
    index[0] = (0, len(gzip_bomb))
    (path / "1_1_1" / "0.shard").write_bytes(index.tobytes() + gzip_bomb)
    outcome = run_child(fork_server, case, path)
    message = assert_refused_fast(outcome, "1_1_1/0.shard", "inflate to more than the")
    assert "minishard 0's index" in message, message
    assert "for at most" in message, message  # the bound, in chunks


def test_a_gzip_chunk_bomb_in_a_shard(
    fork_server: ForkServer, tmp_path: Path, gzip_bomb: bytes
) -> None:
    """A shard (data_encoding gzip) whose chunk 0 inflates to 512 MiB instead of 1,024 bytes."""
    from shardpipe.formats.precomputed import PrecomputedSharding

    path = _volume(tmp_path / "vol")
    spec = PrecomputedSharding.from_json(SHARDING)
    ids = np.array([0], dtype=np.uint64)
    head, tail = spec.encode_indexes(
        ids, np.array([0]), np.array([len(gzip_bomb)]), data_stop=len(gzip_bomb)
    )
    (path / "1_1_1" / "0.shard").write_bytes(head + gzip_bomb + tail)
    outcome = run_child(fork_server, "verify", path)
    assert_refused_fast(outcome, "1_1_1/0.shard: chunk 0", "more than the 1,024 bytes expected")


def test_a_gz_chunk_file_bomb(fork_server: ForkServer, tmp_path: Path, gzip_bomb: bytes) -> None:
    """An unsharded scale whose ``.gz`` chunk file inflates to 512 MiB instead of 512 bytes."""
    import gzip

    path = tmp_path / "vol"
    (path / "s0").mkdir(parents=True)
    info = {
        "@type": "neuroglancer_multiscale_volume",
        "type": "image",
        "data_type": "uint8",
        "num_channels": 1,
        "scales": [
            {
                "key": "s0",
                "size": [16, 8, 8],
                "chunk_sizes": [[8, 8, 8]],
                "resolution": [1, 1, 1],
                "voxel_offset": [0, 0, 0],
                "encoding": "raw",
            }
        ],
    }
    (path / "info").write_text(json.dumps(info))
    (path / "s0" / "0-8_0-8_0-8.gz").write_bytes(gzip.compress(bytes(512)))
    (path / "s0" / "8-16_0-8_0-8.gz").write_bytes(gzip_bomb)
    outcome = run_child(fork_server, "verify", path)
    message = assert_refused_fast(outcome, "s0/8-16_0-8_0-8.gz", "the 512 bytes expected")
    assert "s0/0-8_0-8_0-8.gz" not in message  # the good chunk is fine


# -- absurd grids: valid info files whose grids no check may enumerate ----------------------------
GRIDS = {
    # issue 28: a 456-byte info, size 400^3 in chunks of 1: 6.1 GB and 31 s (a mesh of 64 M chunks)
    "400^3 chunks of 1, identity": ([400] * 3, "identity", 3),
    "400^3 chunks of 1, murmurhash": ([400] * 3, "murmurhash3_x86_128", 3),
    "2**57 chunks, identity": ([2**19] * 3, "identity", 10),
    "2**64 chunks, murmurhash": ([2**22, 2**21, 2**21], "murmurhash3_x86_128", 20),
}


@pytest.mark.parametrize("case", ["verify", "info"])
@pytest.mark.parametrize("grid", sorted(GRIDS))
def test_absurd_grids_cost_what_the_files_hold(
    fork_server: ForkServer, tmp_path: Path, grid: str, case: str
) -> None:
    """The info says a vast grid of 1-voxel chunks; one real shard file is present."""
    size, hash_, shard_bits = GRIDS[grid]
    path = _volume(tmp_path / "vol")
    info = json.loads((path / "info").read_text())
    scale = info["scales"][0]
    scale.update(size=size, chunk_sizes=[[1, 1, 1]])
    scale["sharding"].update(hash=hash_, shard_bits=shard_bits)
    (path / "info").write_text(json.dumps(info))
    (path / "1_1_1" / "0.shard").rename(path / "1_1_1" / f"{0:0{-(-shard_bits // 4)}x}.shard")
    for other in (path / "1_1_1").glob("[1-9a-f]*.shard"):
        other.unlink()
    outcome = run_child(fork_server, case, path)
    message = assert_refused_fast(outcome)
    assert f"size {size}" in message and "1 shard file(s)" in message, message
