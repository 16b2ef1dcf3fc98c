"""Decompression bounded by the size the metadata promises (pure).

A few hundred KB of gzip can inflate to gigabytes: the stored bytes are
untrusted, the size they should decode to is not (it follows from a
chunk's shape and data type, or from how many entries an index can have).
Every decompression of stored bytes goes through here, so that it stops
one byte past the size expected and fails with a
:class:`~shardpipe.errors.ChunkDecodeError` that gives both sizes, without
ever holding more than that.

* :func:`gunzip` and :func:`unzlib`: DEFLATE data in gzip members (one or
  more, as Python's :func:`gzip.decompress` reads them: zero padding after
  a member is skipped) or in a zlib stream, decompressed with
  :meth:`zlib.Decompress.decompress`'s ``max_length``;
* :func:`bunzip2` and :func:`unlzma`: bzip2 and lzma/xz streams (one or
  more, as ``bz2.decompress`` and ``lzma.decompress`` read them),
  decompressed with their decompressors' ``max_length``;
* :func:`check_blosc_header` and :func:`check_lz4_header`: a blosc frame, and
  numcodecs' lz4 (a 4-byte little-endian decoded size, then an LZ4 block),
  declare their decoded size in a header, checked before blosc or lz4
  allocates it.

zstd frames are checked by :mod:`shardpipe.codec.zstd_frames` (their declared
content size) before they are decoded into a buffer of the size expected.
"""

from __future__ import annotations

import bz2
import lzma
import zlib
from collections.abc import Buffer, Callable, Sequence
from typing import Any

from shardpipe.errors import ChunkDecodeError

GZIP_MAGIC = b"\x1f\x8b"
BLOSC_HEADER_NBYTES = 16
LZ4_HEADER_NBYTES = 4


def gunzip(data: Buffer, limit: int) -> bytes:
    """The bytes of gzip member(s) ``data``, at most ``limit`` of them.

    Raises
    ------
    shardpipe.errors.ChunkDecodeError
        If the data inflates to more than ``limit`` bytes, is not gzip, is
        cut short or fails its CRC-32.
    """
    view = memoryview(data).cast("B")
    out: list[bytes] = []
    total = 0
    rest = bytes(view)
    while True:
        if rest[:2] != GZIP_MAGIC:
            what = "does not start" if not out else "is followed by bytes that are not"
            raise ChunkDecodeError(f"{len(view):,} bytes of gzip data: it {what} a gzip member")
        member, rest = _inflate(rest, limit - total, 31, len(view), "gzip", limit)
        out.append(member)
        total += len(member)
        rest = rest.lstrip(b"\x00")  # as gzip.decompress: zero padding between members
        if not rest:
            return b"".join(out)


def unzlib(data: Buffer, limit: int) -> bytes:
    """The bytes of the zlib stream ``data``, at most ``limit`` of them.

    Bytes after the end of the stream are ignored, as :func:`zlib.decompress`
    ignores them.

    Raises
    ------
    shardpipe.errors.ChunkDecodeError
        If the stream inflates to more than ``limit`` bytes, is not zlib, is
        cut short or fails its Adler-32.
    """
    view = memoryview(data).cast("B")
    out, _ = _inflate(bytes(view), limit, 15, len(view), "zlib", limit)
    return out


def _inflate(
    data: bytes, limit: int, wbits: int, stored: int, kind: str, expected: int
) -> tuple[bytes, bytes]:
    """One gzip member or zlib stream of ``data`` (at most ``limit`` bytes), and what follows.

    ``stored`` and ``expected`` are the sizes messages give: all the data,
    and all it may inflate to.
    """
    inflater = zlib.decompressobj(wbits=wbits)
    try:
        out = inflater.decompress(data, max(limit, 0) + 1)
    except zlib.error as err:
        raise ChunkDecodeError(f"{stored:,} bytes of {kind} data do not inflate ({err})") from err
    if len(out) > limit:
        raise ChunkDecodeError(
            f"{stored:,} bytes of {kind} data inflate to more than the {expected:,} bytes expected"
        )
    if not inflater.eof:
        raise ChunkDecodeError(
            f"{stored:,} bytes of {kind} data are cut short (no end of stream after "
            f"{len(out):,} bytes)"
        )
    return out, inflater.unused_data


def bunzip2(data: Buffer, limit: int) -> bytes:
    """The bytes of the bzip2 stream(s) ``data``, at most ``limit`` of them.

    As ``bz2.decompress`` reads them: stream after stream, bytes after a
    whole stream that do not start another are ignored.

    Raises
    ------
    shardpipe.errors.ChunkDecodeError
        If the data inflates to more than ``limit`` bytes, is not bzip2 or is
        cut short.
    """
    return _streams(data, limit, "bz2", bz2.BZ2Decompressor, (OSError, ValueError))


def unlzma(
    data: Buffer,
    limit: int,
    *,
    format: int = lzma.FORMAT_AUTO,
    filters: Sequence[dict[str, Any]] | None = None,
) -> bytes:
    """The bytes of the lzma stream(s) ``data``, at most ``limit`` of them.

    As ``lzma.decompress`` reads them with ``format`` and ``filters``
    (what numcodecs' ``LZMA`` codec passes it): stream after stream, bytes
    after a whole stream that do not start another are ignored.

    Raises
    ------
    shardpipe.errors.ChunkDecodeError
        If the data inflates to more than ``limit`` bytes, is not lzma data
        of that format (or the decoder cannot get the memory it declares), or
        is cut short.
    """

    def decompressor() -> lzma.LZMADecompressor:
        return lzma.LZMADecompressor(format=format, filters=filters)

    return _streams(data, limit, "lzma", decompressor, (lzma.LZMAError, MemoryError))


def _streams(
    data: Buffer,
    limit: int,
    kind: str,
    decompressor: Callable[[], Any],
    errors: tuple[type[BaseException], ...],
) -> bytes:
    """Concatenated streams of ``data``, each through a new ``decompressor()``: at most ``limit``.

    The decompressor is ``bz2.BZ2Decompressor`` or
    ``lzma.LZMADecompressor``, whose ``decompress`` takes ``max_length``
    and raises ``errors`` on bad data.
    """
    view = memoryview(data).cast("B")
    stored = len(view)
    rest = bytes(view)
    if not rest:
        raise ChunkDecodeError(f"0 bytes are not {kind} data")
    out: list[bytes] = []
    total = 0
    while rest:
        inflater = decompressor()
        try:
            part = inflater.decompress(rest, max(limit - total, 0) + 1)
        except errors as err:
            if out:
                break  # as bz2.decompress and lzma.decompress: not another stream, ignored
            raise ChunkDecodeError(f"{stored:,} bytes are not {kind} data ({err})") from err
        total += len(part)
        if total > limit:
            raise ChunkDecodeError(
                f"{stored:,} bytes of {kind} data inflate to more than the {limit:,} bytes expected"
            )
        out.append(part)
        if not inflater.eof:
            raise ChunkDecodeError(
                f"{stored:,} bytes of {kind} data are cut short (no end of stream after "
                f"{total:,} bytes)"
            )
        rest = inflater.unused_data
    return b"".join(out)


def check_lz4_header(data: Buffer, limit: int, *, exact: bool) -> None:
    """Check the decoded size numcodecs' lz4 declares against the size it must decode to.

    numcodecs' ``LZ4`` codec stores the decoded size (4 bytes, little endian)
    before the LZ4 block, and allocates that much before decoding it.

    Parameters
    ----------
    data : bytes-like
        The encoded chunk.
    limit : int
        Bytes it must decode to (``exact``), or at most.
    exact : bool
        Whether the decoded size is known exactly.

    Raises
    ------
    shardpipe.errors.ChunkDecodeError
        If the header is cut short or declares a decoded size other than (or
        more than) ``limit``.
    """
    view = memoryview(data).cast("B")
    if len(view) < LZ4_HEADER_NBYTES:
        raise ChunkDecodeError(
            f"{len(view)} bytes, shorter than the {LZ4_HEADER_NBYTES}-byte lz4 header"
        )
    _check_declared("lz4", int.from_bytes(view[:LZ4_HEADER_NBYTES], "little"), limit, exact)


def _check_declared(kind: str, nbytes: int, limit: int, exact: bool) -> None:
    """Refuse a ``kind`` header declaring ``nbytes`` decoded bytes other than (above) ``limit``."""
    if nbytes > limit or (exact and nbytes != limit):
        expected = f"the {limit:,}" if exact else f"at most {limit:,}"
        raise ChunkDecodeError(
            f"the {kind} header declares {nbytes:,} decoded bytes, {expected} expected"
        )


def check_blosc_header(data: Buffer, limit: int, *, exact: bool) -> None:
    """Check a blosc frame's header against the size it must decode to.

    Parameters
    ----------
    data : bytes-like
        The frame.
    limit : int
        Bytes it must decode to (``exact``), or at most.
    exact : bool
        Whether the decoded size is known exactly.

    Raises
    ------
    shardpipe.errors.ChunkDecodeError
        If the header is cut short, declares a frame size other than the
        data's, or a decoded size other than (or more than) ``limit``.
    """
    view = memoryview(data).cast("B")
    if len(view) < BLOSC_HEADER_NBYTES:
        raise ChunkDecodeError(
            f"{len(view)} bytes, shorter than the {BLOSC_HEADER_NBYTES}-byte blosc header"
        )
    nbytes = int.from_bytes(view[4:8], "little")
    cbytes = int.from_bytes(view[12:16], "little")
    if cbytes != len(view):
        raise ChunkDecodeError(
            f"the blosc header declares a frame of {cbytes:,} bytes, the chunk has {len(view):,}"
        )
    _check_declared("blosc", nbytes, limit, exact)
