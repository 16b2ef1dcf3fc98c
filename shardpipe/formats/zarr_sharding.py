"""The zarr ``sharding_indexed`` shard format (ZEP 2), without any I/O.

A shard is a byte string holding encoded inner chunks in any order, with
unused space allowed between them, plus an index of ``(offset, nbytes)``
pairs, one per inner chunk slot in C order of the shard's chunk grid,
placed at the start or the end of the shard. An empty slot is
``(2**64 - 1, 2**64 - 1)``. The index codecs shardpipe writes are ``bytes``
(little endian) followed by ``crc32c``: ``16 * n_slots`` bytes of
little-endian ``uint64`` pairs and a 4-byte little-endian CRC32C of those
bytes. It reads indexes without a checksum and in big endian too.

Layouts written by shardpipe::

    index_location="end":    | chunk | chunk | ... | chunk | index | crc |
    index_location="start":  | index | crc | (padding) | chunk | ... | chunk |

A shard written in parts has the parts' bytes in part order, each part its
chunks back to back plus, possibly, unused padding at its end; with the
index at the start, the index is padded to the store's smallest part.

Shard keys follow the array's chunk key encoding: ``c/0/1/2`` ("default",
separator "/"), ``c.0.1.2`` ("default", "."), or ``0.1.2`` ("v2");
:meth:`ZarrShardingFormat.coords` reads a listed key back into shard
coordinates, and tells keys that are no shard of the grid.
"""

from __future__ import annotations

from collections.abc import Buffer
from dataclasses import dataclass
from typing import Any, Literal

import crc32c
import numpy as np

from shardpipe.core.checks import check_choice
from shardpipe.core.grid import Coords, Shape
from shardpipe.errors import ShardFormatError
from shardpipe.formats.base import EMPTY, RangeReader, ShardIndex

__all__ = [
    "CHECKSUM_NBYTES",
    "EMPTY",
    "INDEX_LOCATIONS",
    "IndexLocation",
    "ShardFormatError",
    "ZarrShardingFormat",
    "check_index_location",
    "decode_index",
    "encode_index",
    "index_nbytes",
]

CHECKSUM_NBYTES = 4
IndexLocation = Literal["start", "end"]
INDEX_LOCATIONS: tuple[IndexLocation, ...] = ("start", "end")
_MAX_DIGITS = 19
"""Digits of the largest shard coordinate a key can name (extents are below 2**63)."""


def check_index_location(index_location: Any) -> IndexLocation:
    """Return ``index_location`` if it is ``"start"`` or ``"end"``.

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        Otherwise, naming ``index_location``.
    """
    check_choice("index_location", index_location, INDEX_LOCATIONS, "Use 'start' or 'end'")
    result: IndexLocation = index_location
    return result


def index_nbytes(n_slots: int, *, checksum: bool = True) -> int:
    """Return the encoded size of an index with ``n_slots`` entries."""
    return 16 * n_slots + (CHECKSUM_NBYTES if checksum else 0)


def encode_index(index: ShardIndex, *, checksum: bool = True) -> bytes:
    """Encode with the index codecs ``bytes`` (little endian) [+ ``crc32c``]."""
    body = index.entries.astype("<u8", copy=False).tobytes()
    if not checksum:
        return body
    return body + crc32c.crc32c(body).to_bytes(CHECKSUM_NBYTES, "little")


def decode_index(
    data: Buffer, n_slots: int, *, checksum: bool = True, endian: str = "little"
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
    return ShardIndex(entries)


@dataclass(frozen=True)
class ZarrShardingFormat:
    """The ``sharding_indexed`` layout of one array's shards.

    Parameters
    ----------
    chunks_per_shard : tuple of int
        Inner chunks along each dimension of a shard.
    index_location : {"start", "end"}
        Where the index goes.
    checksum : bool
        Whether the index codecs end with ``crc32c``.
    endian : {"little", "big"}
        Byte order of the index entries (``bytes`` codec).
    key_prefix : str or None
        First key component (``"c"`` for the "default" chunk key encoding,
        None for "v2").
    key_separator : str
        Separator of key components (``"/"`` or ``"."``).
    """

    chunks_per_shard: Shape
    index_location: IndexLocation = "end"
    checksum: bool = True
    endian: str = "little"
    key_prefix: str | None = "c"
    key_separator: str = "/"

    def __post_init__(self) -> None:
        if self.index_location not in INDEX_LOCATIONS:
            raise ShardFormatError(f"unknown index_location {self.index_location!r}")
        if self.endian not in ("little", "big"):
            raise ShardFormatError(f"unknown index byte order {self.endian!r}")

    @property
    def n_slots(self) -> int:
        """Number of inner chunk slots of a shard."""
        n = 1
        for k in self.chunks_per_shard:
            n *= k
        return n

    def slot(self, local: Coords) -> int:
        """C-order position of inner chunk ``local`` in the shard's chunk grid."""
        slot = 0
        for j, n in zip(local, self.chunks_per_shard, strict=True):
            slot = slot * n + j
        return slot

    def key(self, shard: Coords) -> str:
        """Key of the shard at ``shard``, relative to the array."""
        if self.key_prefix is None:
            return self.key_separator.join(map(str, shard)) if shard else "0"
        return self.key_separator.join([self.key_prefix, *map(str, shard)])

    def coords(self, key: str, grid: Shape | None = None) -> Coords | None:
        """The shard that ``key`` (relative to the array) names: the inverse of :meth:`key`.

        Parameters
        ----------
        key : str
            A key relative to the array, as a listing of its shard prefix gives.
        grid : tuple of int, optional
            Shards along each dimension: coordinates outside it name no shard.

        Returns
        -------
        tuple of int or None
            The shard's grid coordinates, or None when ``key`` is not exactly
            the key :meth:`key` gives some shard (of ``grid``): another prefix
            or separator, another number of components, a component that is
            not a plain decimal number (signs, leading zeros, spaces), or a
            position past the grid.
        """
        ndim = len(self.chunks_per_shard)
        if ndim == 0:
            return () if key == self.key(()) else None
        if self.key_prefix is not None:
            head = self.key_prefix + self.key_separator
            if not key.startswith(head):
                return None
            key = key[len(head) :]
        parts = key.split(self.key_separator, ndim)
        if len(parts) != ndim:
            return None
        coords = []
        for part in parts:
            if not (0 < len(part) <= _MAX_DIGITS and part.isascii() and part.isdigit()):
                return None
            if part[0] == "0" and len(part) > 1:
                return None
            coords.append(int(part))
        if grid is not None and any(c >= n for c, n in zip(coords, grid, strict=True)):
            return None
        return tuple(coords)

    @property
    def key_head(self) -> str | None:
        """What every shard key starts with (``c/`` or ``c.``); None for "v2" keys."""
        return None if self.key_prefix is None else self.key_prefix + self.key_separator

    @property
    def has_tail(self) -> bool:
        """Whether the index follows the chunks."""
        return self.index_location == "end"

    @property
    def chunks_in_any_order(self) -> bool:
        """True: the index gives each chunk's offset and length."""
        return True

    def index_nbytes(self) -> int:
        """Encoded size of the index."""
        return index_nbytes(self.n_slots, checksum=self.checksum)

    def head_nbytes(self, min_part_size: int = 0) -> int:
        """The index (padded to ``min_part_size``) when it goes first, else 0."""
        if self.index_location == "end":
            return 0
        return max(self.index_nbytes(), min_part_size)

    def encode_index(
        self, index: ShardIndex, *, shard: Coords, head_nbytes: int, data_nbytes: int
    ) -> tuple[bytes, bytes]:
        """Return ``(head, tail)``: the encoded index before or after the chunks.

        The index is the same whichever the shard and wherever the data ends:
        ``shard`` and ``data_nbytes`` are not used.
        """
        if self.endian != "little":
            raise ShardFormatError("shardpipe writes shard indexes in little endian only")
        encoded = encode_index(index, checksum=self.checksum)
        if self.index_location == "end":
            return b"", encoded
        if head_nbytes < len(encoded):
            raise ShardFormatError(
                f"a head of {head_nbytes} bytes cannot hold a {len(encoded)}-byte index"
            )
        return encoded.ljust(head_nbytes, b"\0"), b""

    def index_range(self, shard_nbytes: int) -> tuple[int, int]:
        """Return ``(start, stop)`` of the index inside a shard of ``shard_nbytes`` bytes."""
        size = self.index_nbytes()
        if shard_nbytes < size:
            raise ShardFormatError(
                f"shard of {shard_nbytes} bytes is too short for a {size}-byte index"
            )
        return (0, size) if self.index_location == "start" else (shard_nbytes - size, shard_nbytes)

    def read_index(
        self, read: RangeReader, shard_nbytes: int, *, shard: Coords
    ) -> tuple[ShardIndex, tuple[int, int]]:
        """Read and decode the index of a shard of ``shard_nbytes`` bytes (any ``shard``)."""
        where = self.index_range(shard_nbytes)
        index = decode_index(read(*where), self.n_slots, checksum=self.checksum, endian=self.endian)
        return index, where
