"""zlib streams re-wrapped as gzip members: the same DEFLATE data, any reader's gzip."""

from __future__ import annotations

import gzip
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardpipe.codec.zlib_rewrap import zlib_to_gzip
from shardpipe.errors import ShardFormatError
from tests.support.examples import scaled


@settings(max_examples=scaled(60), deadline=None)
@given(st.binary(max_size=5000), st.integers(0, 9))
def test_the_deflate_data_is_kept_and_gzip_decodes_it(data: bytes, level: int) -> None:
    stream = zlib.compress(data, level)
    member = zlib_to_gzip(stream, len(data))
    assert gzip.decompress(member) == data
    assert member[10:-8] == stream[2:-4]


def test_what_is_not_one_whole_zlib_stream_is_refused() -> None:
    stream = zlib.compress(b"some bytes" * 50)
    dictionary = zlib.compressobj(zdict=b"some bytes")
    with_dictionary = dictionary.compress(b"some bytes") + dictionary.flush()
    for bad, words in [
        (b"\x1f\x8b\x08\x00" + stream, "bad header"),
        (with_dictionary, "preset dictionary"),
        (stream[:-6], "cut short"),
        (stream + b"x", "followed by other bytes"),
        (stream[:2] + b"\xff" * 20, "does not decompress"),
    ]:
        with pytest.raises(ShardFormatError, match=words):
            zlib_to_gzip(bad, 1 << 20)


def test_a_zlib_bomb_is_refused_at_the_size_expected() -> None:
    """256 MiB of zeros in 255 KB of zlib: refused one byte past the chunk's size."""
    deflate = zlib.compressobj(9)
    bomb = b"".join([deflate.compress(bytes(1 << 20)) for _ in range(256)] + [deflate.flush()])
    with pytest.raises(ShardFormatError, match="inflates to more than the 65,536 bytes"):
        zlib_to_gzip(bomb, 65_536)
    assert gzip.decompress(zlib_to_gzip(zlib.compress(bytes(65_536)), 65_536)) == bytes(65_536)
