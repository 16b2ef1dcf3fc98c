"""Bounded decompression (``shardpipe.bounded_decode``) against Python's gzip and zlib."""

from __future__ import annotations

import gzip
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardpipe.codec.bounded import check_blosc_header, gunzip, unzlib
from shardpipe.errors import ChunkDecodeError


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(max_size=3000), min_size=1, max_size=4), st.integers(0, 3))
def test_gunzip_reads_what_gzip_reads(members: list[bytes], padding: int) -> None:
    data = b"".join(gzip.compress(m, mtime=0) + bytes(padding) for m in members)
    whole = b"".join(members)
    assert gunzip(data, len(whole)) == gzip.decompress(data) == whole
    if whole:
        with pytest.raises(ChunkDecodeError, match=f"more than the {len(whole) - 1:,} bytes"):
            gunzip(data, len(whole) - 1)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=5000), st.binary(max_size=8))
def test_unzlib_reads_what_zlib_reads(data: bytes, after: bytes) -> None:
    stream = zlib.compress(data) + after
    assert unzlib(stream, len(data)) == zlib.decompress(stream) == data


@settings(max_examples=200, deadline=None)
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
