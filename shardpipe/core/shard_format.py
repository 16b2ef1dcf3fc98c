"""The ``sharding_indexed`` binary shard format (ZEP 2), without any I/O.

A shard is a byte string holding encoded inner chunks in any order, with
unused space allowed between them, plus an index of ``(offset, nbytes)``
pairs, one per inner chunk slot in C order, placed at the start or the end
of the shard. An empty slot is ``(2**64 - 1, 2**64 - 1)``. shardpipe always
encodes the index with the index codecs ``bytes`` (little endian) followed
by ``crc32c``: ``16 * n_slots`` bytes of little-endian ``uint64`` pairs and
a 4-byte little-endian CRC32C of those bytes.

Layouts written by shardpipe::

    index_location="end":    | chunk | chunk | ... | chunk | index | crc |
    index_location="start":  | index | crc | chunk | chunk | ... | chunk |

A shard written in parts has the parts' bytes in part order, each part its
chunks back to back plus, possibly, unused padding at its end.
"""

from __future__ import annotations

from collections.abc import Buffer, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import crc32c
import numpy as np

from shardpipe.errors import ShardpipeError

EMPTY = np.uint64(2**64 - 1)
"""Offset and nbytes of an inner chunk slot that holds no data."""

CHECKSUM_NBYTES = 4
IndexLocation = Literal["start", "end"]
INDEX_LOCATIONS: tuple[IndexLocation, ...] = ("start", "end")


class ShardFormatError(ShardpipeError, ValueError):
    """A shard's bytes do not follow the ``sharding_indexed`` format."""


def index_nbytes(n_slots: int, *, checksum: bool = True) -> int:
    """Return the encoded size of an index with ``n_slots`` entries."""
    return 16 * n_slots + (CHECKSUM_NBYTES if checksum else 0)


@dataclass
class ShardIndex:
    """Offsets and lengths of the inner chunks of one shard.

    Parameters
    ----------
    entries : numpy.ndarray
        ``uint64`` array of shape ``(n_slots, 2)``: column 0 the offset,
        column 1 the nbytes; both ``EMPTY`` for a slot without data.
    """

    entries: np.ndarray

    @classmethod
    def empty(cls, n_slots: int) -> ShardIndex:
        """Return an index whose slots are all empty."""
        return cls(np.full((n_slots, 2), EMPTY, dtype=np.uint64))

    @property
    def n_slots(self) -> int:
        """Number of inner chunk slots."""
        return int(self.entries.shape[0])

    def set(self, slot: int, offset: int, nbytes: int) -> None:
        """Record that slot ``slot`` is stored at ``[offset, offset + nbytes)``."""
        self.entries[slot, 0] = offset
        self.entries[slot, 1] = nbytes

    def stored(self) -> np.ndarray:
        """Return a boolean mask of the slots that hold data."""
        mask: np.ndarray = ~((self.entries[:, 0] == EMPTY) & (self.entries[:, 1] == EMPTY))
        return mask

    def encode(self) -> bytes:
        """Encode with the index codecs ``bytes`` (little endian) + ``crc32c``."""
        body = self.entries.astype("<u8", copy=False).tobytes()
        return body + crc32c.crc32c(body).to_bytes(CHECKSUM_NBYTES, "little")

    @classmethod
    def decode(
        cls, data: Buffer, n_slots: int, *, checksum: bool = True, endian: str = "little"
    ) -> ShardIndex:
        """Decode an index, checking its CRC32C when ``checksum`` is true.

        Raises
        ------
        ShardFormatError
            If the length is wrong or the checksum does not match.
        """
        raw = memoryview(data).cast("B")
        expected = index_nbytes(n_slots, checksum=checksum)
        if len(raw) != expected:
            raise ShardFormatError(
                f"shard index is {len(raw)} bytes, expected {expected} for {n_slots} slots"
            )
        body = raw[: 16 * n_slots]
        if checksum:
            stored = int.from_bytes(raw[16 * n_slots :], "little")
            actual = crc32c.crc32c(body)
            if stored != actual:
                raise ShardFormatError(
                    f"shard index CRC32C mismatch: stored {stored:#010x}, computed {actual:#010x}"
                )
        dtype = "<u8" if endian == "little" else ">u8"
        entries = np.frombuffer(body, dtype=dtype).astype(np.uint64).reshape(n_slots, 2)
        return cls(entries)


def shard_index_range(
    shard_nbytes: int, n_slots: int, location: IndexLocation, *, checksum: bool = True
) -> tuple[int, int]:
    """Return ``(start, stop)`` of the index inside a shard of ``shard_nbytes`` bytes."""
    size = index_nbytes(n_slots, checksum=checksum)
    if shard_nbytes < size:
        raise ShardFormatError(
            f"shard of {shard_nbytes} bytes is too short for a {size}-byte index"
        )
    return (0, size) if location == "start" else (shard_nbytes - size, shard_nbytes)


@dataclass
class PartManifest:
    """Where the inner chunks of one part of a shard lie within that part.

    Parameters
    ----------
    slots : list of int
        Index slots of the stored chunks, in the order they were laid out.
    offsets : list of int
        Byte offset of each chunk from the start of the part.
    nbytes : list of int
        Encoded length of each chunk.
    size : int
        Length of the part in bytes, including any trailing padding.
    """

    slots: list[int] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    nbytes: list[int] = field(default_factory=list)
    size: int = 0

    @property
    def data_nbytes(self) -> int:
        """Bytes of chunk data, without padding."""
        return sum(self.nbytes)


def lay_out_part(
    encoded: Iterable[tuple[int, Buffer]], *, min_size: int = 0
) -> tuple[list[Buffer], PartManifest]:
    """Lay encoded chunks back to back and describe where each one landed.

    Parameters
    ----------
    encoded : iterable of (slot, bytes-like)
        Index slot and encoded bytes of every chunk to store.
    min_size : int
        Pad the part with zero bytes up to this size (object stores require
        every multipart part but the last to be at least 5 MiB). An empty
        part is never padded.

    Returns
    -------
    buffers : list of bytes-like
        The buffers to write, in order; their concatenation is the part.
    manifest : PartManifest
        Offsets and lengths relative to the start of the part.
    """
    buffers: list[Buffer] = []
    manifest = PartManifest()
    offset = 0
    for slot, data in encoded:
        n = memoryview(data).nbytes
        manifest.slots.append(slot)
        manifest.offsets.append(offset)
        manifest.nbytes.append(n)
        buffers.append(data)
        offset += n
    if 0 < offset < min_size:
        buffers.append(bytes(min_size - offset))
        offset = min_size
    manifest.size = offset
    return buffers, manifest


def stamp_index(n_slots: int, parts: Sequence[PartManifest], *, first_offset: int) -> ShardIndex:
    """Build the index of a shard made of ``parts`` laid out in order.

    Parameters
    ----------
    n_slots : int
        Number of inner chunk slots in the shard.
    parts : sequence of PartManifest
        The parts in the order their bytes appear in the shard.
    first_offset : int
        Byte offset of the first part: the size of whatever precedes it
        (the index and its padding when the index is at the start, else 0).
    """
    index = ShardIndex.empty(n_slots)
    base = first_offset
    for part in parts:
        if part.slots:
            slots = np.asarray(part.slots, dtype=np.intp)
            index.entries[slots, 0] = np.asarray(part.offsets, dtype=np.uint64) + np.uint64(base)
            index.entries[slots, 1] = np.asarray(part.nbytes, dtype=np.uint64)
        base += part.size
    return index


def assemble_shard(
    encoded: Iterable[tuple[int, Buffer]], n_slots: int, location: IndexLocation
) -> list[Buffer]:
    """Return the buffers whose concatenation is a complete shard.

    Parameters
    ----------
    encoded : iterable of (slot, bytes-like)
        Index slot and encoded bytes of every stored inner chunk.
    n_slots : int
        Number of inner chunk slots in the shard.
    location : {"start", "end"}
        Where the index goes.
    """
    chunks, manifest = lay_out_part(encoded)
    head = index_nbytes(n_slots) if location == "start" else 0
    index = stamp_index(n_slots, [manifest], first_offset=head).encode()
    return [index, *chunks] if location == "start" else [*chunks, index]
