"""A zlib stream re-wrapped as a gzip member, its DEFLATE data unchanged (pure).

A zlib stream (RFC 1950) and a gzip member (RFC 1952) carry the same DEFLATE
data between different headers and trailers. Zarr v3 readers all decode
``gzip``; tensorstore has no ``zlib`` codec. :func:`zlib_to_gzip` swaps the
wrapper: the 2-byte zlib header and the Adler-32 trailer go, a 10-byte gzip
header and the CRC-32 and length of the decompressed bytes come. The
DEFLATE data is not recompressed (it is decompressed once, to check it and
to compute the CRC-32, never past the size an inner chunk can hold).
"""

from __future__ import annotations

import zlib

from shardpipe.errors import ShardFormatError

GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
"""Magic, DEFLATE, no flags, no modification time, no extra flags, unknown OS."""


def zlib_to_gzip(stream: bytes, limit: int) -> bytes:
    """The gzip member holding the DEFLATE data of the zlib ``stream``.

    Parameters
    ----------
    stream : bytes
        One whole zlib stream.
    limit : int
        Most bytes it may inflate to (what an inner chunk holds at that
        step): the stream is decompressed no further.

    Raises
    ------
    shardpipe.errors.ShardFormatError
        If ``stream`` is not one whole zlib stream (or uses a preset
        dictionary), or inflates to more than ``limit`` bytes.
    """
    if len(stream) < 6 or (stream[0] & 0x0F) != 8 or int.from_bytes(stream[:2], "big") % 31:
        raise ShardFormatError("a chunk is not a zlib stream (bad header)")
    if stream[1] & 0x20:
        raise ShardFormatError("a chunk's zlib stream uses a preset dictionary")
    inflater = zlib.decompressobj(wbits=15)
    try:
        data = inflater.decompress(stream, max(limit, 0) + 1)
    except zlib.error as err:
        raise ShardFormatError(f"a chunk's zlib stream does not decompress ({err})") from err
    if len(data) > limit:
        raise ShardFormatError(
            f"a chunk's zlib stream of {len(stream):,} bytes inflates to more than the "
            f"{limit:,} bytes expected"
        )
    if not inflater.eof or inflater.unused_data:
        raise ShardFormatError("a chunk's zlib stream is cut short or followed by other bytes")
    trailer = (zlib.crc32(data) & 0xFFFFFFFF).to_bytes(4, "little") + (
        len(data) & 0xFFFFFFFF
    ).to_bytes(4, "little")
    return GZIP_HEADER + stream[2:-4] + trailer
