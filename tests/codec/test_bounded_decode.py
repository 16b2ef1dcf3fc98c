"""Bounded decompression (``shardpipe.codec.bounded``) against Python's gzip, zlib, bz2 and lzma."""

from __future__ import annotations

import bz2
import gzip
import lzma
import tracemalloc
import zlib
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardpipe.codec.bounded import (
    bunzip2,
    check_blosc_header,
    check_lz4_header,
    gunzip,
    unlzma,
    unzlib,
)
from shardpipe.errors import ChunkDecodeError
from tests.support.examples import scaled


@settings(max_examples=scaled(100), deadline=None)
@given(st.lists(st.binary(max_size=3000), min_size=1, max_size=4), st.integers(0, 3))
def test_gunzip_reads_what_gzip_reads(members: list[bytes], padding: int) -> None:
    data = b"".join(gzip.compress(m, mtime=0) + bytes(padding) for m in members)
    whole = b"".join(members)
    assert gunzip(data, len(whole)) == gzip.decompress(data) == whole
    if whole:
        with pytest.raises(ChunkDecodeError, match=f"more than the {len(whole) - 1:,} bytes"):
            gunzip(data, len(whole) - 1)


@settings(max_examples=scaled(100), deadline=None)
@given(st.binary(max_size=5000), st.binary(max_size=8))
def test_unzlib_reads_what_zlib_reads(data: bytes, after: bytes) -> None:
    stream = zlib.compress(data) + after
    assert unzlib(stream, len(data)) == zlib.decompress(stream) == data


@settings(max_examples=scaled(200), deadline=None)
@given(st.binary(max_size=2000), st.data())
def test_damaged_gzip_raises_only_chunk_decode_errors(data: bytes, draw: st.DataObject) -> None:
    member = bytearray(gzip.compress(data, mtime=0))
    for _ in range(draw.draw(st.integers(1, 4))):
        member[draw.draw(st.integers(0, len(member) - 1))] ^= 1 << draw.draw(st.integers(0, 7))
    cut = draw.draw(st.integers(0, len(member)))
    try:
        out = gunzip(bytes(member[:cut]), len(data))
    except ChunkDecodeError:
        return
    assert out == gzip.decompress(bytes(member[:cut]))  # what is accepted is what gzip reads


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"", "does not start a gzip member"),
        (b"plain text", "does not start a gzip member"),
        (gzip.compress(b"x" * 100, mtime=0)[:-9], "cut short"),
        (gzip.compress(b"x" * 100, mtime=0) + b"garbage", "followed by bytes that are not"),
        (gzip.compress(b"x" * 100, mtime=0)[:-8] + bytes(8), "do not inflate"),  # CRC-32 wrong
    ],
)
def test_gunzip_names_what_is_wrong(data: bytes, words: str) -> None:
    with pytest.raises(ChunkDecodeError, match=words):
        gunzip(data, 1000)


def test_a_bomb_stops_one_byte_past_the_limit() -> None:
    deflate = zlib.compressobj(9, zlib.DEFLATED, 31)
    bomb = b"".join([deflate.compress(bytes(1 << 20)) for _ in range(64)] + [deflate.flush()])
    with pytest.raises(ChunkDecodeError, match=f"{len(bomb):,} bytes of gzip data inflate to"):
        gunzip(bomb, 4096)


def test_blosc_headers_are_checked_before_blosc_allocates() -> None:
    header = bytes([2, 1, 33, 1]) + (1000).to_bytes(4, "little") + bytes(4)
    frame = header + (40).to_bytes(4, "little") + bytes(24)
    check_blosc_header(frame, 1000, exact=True)
    check_blosc_header(frame, 2000, exact=False)
    with pytest.raises(ChunkDecodeError, match="declares 1,000 decoded bytes, the 999"):
        check_blosc_header(frame, 999, exact=True)
    with pytest.raises(ChunkDecodeError, match="at most 999 expected"):
        check_blosc_header(frame, 999, exact=False)
    with pytest.raises(ChunkDecodeError, match="a frame of 40 bytes, the chunk has 41"):
        check_blosc_header(frame + b"x", 1000, exact=True)
    with pytest.raises(ChunkDecodeError, match="shorter than the 16-byte blosc header"):
        check_blosc_header(frame[:10], 1000, exact=True)


# -- bz2, lzma, lz4 (numcodecs' codecs) -----------------------------------------------------------
@settings(max_examples=scaled(60), deadline=None)
@given(st.lists(st.binary(max_size=3000), min_size=1, max_size=3), st.binary(max_size=6))
def test_bunzip2_reads_what_bz2_reads(streams: list[bytes], after: bytes) -> None:
    data = b"".join(bz2.compress(s, 1) for s in streams) + after
    whole = b"".join(streams)
    try:
        expected = bz2.decompress(data)
    except (OSError, ValueError):
        with pytest.raises(ChunkDecodeError):
            bunzip2(data, len(whole))
        return
    assert bunzip2(data, len(whole)) == expected == whole
    if whole:
        with pytest.raises(ChunkDecodeError, match=f"more than the {len(whole) - 1:,} bytes"):
            bunzip2(data, len(whole) - 1)


LZMA_KINDS = {
    "xz": dict(format=lzma.FORMAT_XZ),
    "alone": dict(format=lzma.FORMAT_ALONE),
    "raw": dict(format=lzma.FORMAT_RAW, filters=[{"id": lzma.FILTER_LZMA2, "preset": 1}]),
}


@settings(max_examples=scaled(60), deadline=None)
@given(
    st.lists(st.binary(max_size=3000), min_size=1, max_size=3),
    st.sampled_from(sorted(LZMA_KINDS)),
)
def test_unlzma_reads_what_lzma_reads(streams: list[bytes], kind: str) -> None:
    options = LZMA_KINDS[kind]
    if kind == "raw":
        streams = streams[:1]  # a raw stream has no end marker to find the next one after
    data = b"".join(lzma.compress(s, **options) for s in streams)  # type: ignore[arg-type]
    whole = b"".join(streams)
    assert lzma.decompress(data, **options) == whole  # type: ignore[arg-type]
    assert unlzma(data, len(whole), **options) == whole  # type: ignore[arg-type]
    if whole:
        with pytest.raises(ChunkDecodeError, match=f"more than the {len(whole) - 1:,} bytes"):
            unlzma(data, len(whole) - 1, **options)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "bomb"),
    [
        ("bz2", lambda: bz2.compress(bytes(16 << 20), 1)),  # one stream: 16 MiB in 138 bytes
        ("bz2", lambda: bz2.compress(bytes(1 << 20)) * 32),  # 32 streams
        ("lzma", lambda: lzma.compress(bytes(16 << 20), preset=0)),  # a 256 KiB dictionary
        ("lzma", lambda: lzma.compress(bytes(1 << 20), preset=0) * 32),
    ],
)
def test_bz2_and_lzma_bombs_stop_one_byte_past_the_limit(
    name: str, bomb: Callable[[], bytes]
) -> None:
    data = bomb()
    decode = bunzip2 if name == "bz2" else unlzma
    started = tracemalloc.is_tracing()
    tracemalloc.start()
    try:
        with pytest.raises(ChunkDecodeError, match=f"{len(data):,} bytes of {name} data inflate"):
            decode(data, 4096)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        if not started:
            tracemalloc.stop()
    assert peak < 2 << 20, peak  # the decoder's own memory, never the 16 MiB or more


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"", "not bz2 data"),
        (b"plain text", "not bz2 data"),
        (bz2.compress(b"x" * 100)[:-5], "cut short"),
    ],
)
def test_bunzip2_names_what_is_wrong(data: bytes, words: str) -> None:
    with pytest.raises(ChunkDecodeError, match=words):
        bunzip2(data, 1000)


def test_lz4_headers_are_checked_before_lz4_allocates() -> None:
    from numcodecs import LZ4

    frame = bytearray(LZ4().encode(bytes(1000)))
    check_lz4_header(frame, 1000, exact=True)
    check_lz4_header(frame, 2000, exact=False)
    with pytest.raises(ChunkDecodeError, match="declares 1,000 decoded bytes, the 999"):
        check_lz4_header(frame, 999, exact=True)
    with pytest.raises(ChunkDecodeError, match="at most 999 expected"):
        check_lz4_header(frame, 999, exact=False)
    frame[:4] = (0xFFFFFFFF).to_bytes(4, "little")  # 4 GiB
    with pytest.raises(ChunkDecodeError, match="declares 4,294,967,295 decoded bytes"):
        check_lz4_header(frame, 1 << 20, exact=False)
    with pytest.raises(ChunkDecodeError, match="shorter than the 4-byte lz4 header"):
        check_lz4_header(frame[:3], 1000, exact=True)
