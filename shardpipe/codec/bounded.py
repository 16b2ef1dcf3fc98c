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
* :func:`check_blosc_header`: a blosc frame declares its decoded size in its
  header, checked before blosc allocates it.

zstd frames are checked by :mod:`shardpipe.codec.zstd_frames` (their declared
content size) before they are decoded into a buffer of the size expected.
"""

from __future__ import annotations

import zlib
from collections.abc import Buffer

from shardpipe.errors import ChunkDecodeError

GZIP_MAGIC = b"\x1f\x8b"
BLOSC_HEADER_NBYTES = 16


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
    if nbytes > limit or (exact and nbytes != limit):
        expected = f"the {limit:,}" if exact else f"at most {limit:,}"
        raise ChunkDecodeError(
            f"the blosc header declares {nbytes:,} decoded bytes, {expected} expected"
        )
