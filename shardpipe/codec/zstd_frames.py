"""Reading the frame and block headers of zstd data without decompressing it.

Decoding checks what zstd frames declare (their content size) against the
size an inner chunk can have before any decompression runs, so that a forged
or damaged frame is reported instead of costing an allocation of the size it
claims (:meth:`shardpipe.codec.chunk_codec.ChunkCodec.decode`). Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardpipe.errors import ChunkDecodeError

ZSTD_MAGIC = 0xFD2FB528
SKIPPABLE_MAGIC = 0x184D2A50
"""Skippable frames have magic numbers ``0x184D2A50`` to ``0x184D2A5F``."""


@dataclass(frozen=True)
class ZstdFrames:
    """What the headers of the zstd frames of one chunk say, read without decoding.

    Attributes
    ----------
    frames : int
        Zstd frames (skippable frames not counted).
    declared : int or None
        Sum of the frames' ``Frame_Content_Size``; None when a frame leaves it out.
    least : int
        Bytes the raw and RLE blocks alone produce (a lower bound of the content).
    """

    frames: int
    declared: int | None
    least: int


def zstd_frames(data: bytes | memoryview) -> ZstdFrames:
    """Read the frame and block headers of zstd-compressed ``data`` (RFC 8878, section 3.1).

    Nothing is decompressed and nothing is allocated by what the headers claim.

    Raises
    ------
    ChunkDecodeError
        If the bytes are not a sequence of zstd frames: a wrong magic number,
        a reserved bit or block type, or a header or block running past the end.
    """
    view = memoryview(data).cast("B")
    n = len(view)
    pos, frames, least = 0, 0, 0
    declared: int | None = 0

    def need(count: int, what: str) -> None:
        if pos + count > n:
            raise ChunkDecodeError(
                f"zstd {what} at byte {pos} runs past the end of the {n}-byte chunk"
            )

    if n == 0:
        raise ChunkDecodeError("zstd data is empty")
    while pos < n:
        need(4, "magic number")
        magic = int.from_bytes(view[pos : pos + 4], "little")
        if magic & 0xFFFFFFF0 == SKIPPABLE_MAGIC:
            need(8, "skippable frame header")
            size = int.from_bytes(view[pos + 4 : pos + 8], "little")
            pos += 8
            need(size, "skippable frame")
            pos += size
            continue
        if magic != ZSTD_MAGIC:
            raise ChunkDecodeError(f"no zstd frame at byte {pos} (magic number 0x{magic:08x})")
        pos += 4
        need(1, "frame header")
        descriptor = view[pos]
        fcs_flag, single = descriptor >> 6, (descriptor >> 5) & 1
        if descriptor & 0x08:
            raise ChunkDecodeError(f"zstd frame header at byte {pos - 4} sets its reserved bit")
        dict_nbytes = (0, 1, 2, 4)[descriptor & 3]
        fcs_nbytes = (1 if single else 0, 2, 4, 8)[fcs_flag]
        need(1 + (0 if single else 1) + dict_nbytes + fcs_nbytes, "frame header")
        pos += 1 + (0 if single else 1) + dict_nbytes
        if fcs_nbytes == 0:
            declared = None
        else:
            size = int.from_bytes(view[pos : pos + fcs_nbytes], "little")
            size += 256 if fcs_nbytes == 2 else 0
            declared = None if declared is None else declared + size
        pos += fcs_nbytes
        last = False
        while not last:
            need(3, "block header")
            header = int.from_bytes(view[pos : pos + 3], "little")
            last, kind, size = bool(header & 1), (header >> 1) & 3, header >> 3
            pos += 3
            if kind == 3:
                raise ChunkDecodeError(f"zstd block at byte {pos - 3} has the reserved type 3")
            stored = 1 if kind == 1 else size
            need(stored, "block")
            pos += stored
            least += size if kind in (0, 1) else 0
        if descriptor & 0x04:
            need(4, "content checksum")
            pos += 4
        frames += 1
    if frames == 0:
        raise ChunkDecodeError("zstd data holds only skippable frames")
    return ZstdFrames(frames, declared, least)
