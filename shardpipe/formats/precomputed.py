"""Neuroglancer's precomputed sharded format (``neuroglancer_uint64_sharded_v1``).

The sharding spec (:class:`PrecomputedSharding`): how chunk ids map to
shards and minishards, how a shard file is named, and how its two-level
index is encoded and read. The shard formats built on it, siblings of
:mod:`shardpipe.formats.zarr_sharding` behind the shard-format protocol,
are in :mod:`shardpipe.formats.precomputed_shards`.

A chunk's id (its compressed Morton code, :mod:`shardpipe.core.morton`) is
shifted right by ``preshift_bits`` and hashed (``identity`` or
``murmurhash3_x86_128``); bits ``[0, minishard_bits)`` of the hash give the
minishard, the next ``shard_bits`` the shard. A shard file ``<hex>.shard``
is::

    shard index   2**minishard_bits entries of (start, end) uint64le, the
                  byte range of each minishard's index, counted from the
                  end of the shard index
    chunk data    each chunk's bytes (gzip'd with data_encoding "gzip");
                  a minishard's chunks, in increasing id order, lie at
                  increasing offsets
    minishard     per minishard, [3, n] uint64le (raw or gzip'd): ids,
    indexes       data offsets and sizes, the first two delta-encoded

shardpipe writes the data of all minishards first and their indexes after
(tensorstore puts each minishard's index after its data; readers follow the
offsets, so both are valid).
"""

from __future__ import annotations

import gzip
import struct
from collections.abc import Buffer, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardpipe.codec.bounded import gunzip
from shardpipe.errors import ChunkDecodeError, InvalidArgumentError, ShardFormatError

SHARDING_TYPE = "neuroglancer_uint64_sharded_v1"
HASHES = ("identity", "murmurhash3_x86_128")
ENCODINGS = ("raw", "gzip")
ENTRY = 16  # bytes per shard-index entry
MINISHARD_ENTRY = 24  # bytes per chunk in a decoded minishard index
GZIP_LEVEL = 6

RangeReader = Callable[[int, int], bytes]


@dataclass(frozen=True)
class PrecomputedSharding:
    """The ``sharding`` member of a precomputed scale.

    Parameters
    ----------
    preshift_bits, minishard_bits, shard_bits : int
        See the module's docstring.
    hash : {"identity", "murmurhash3_x86_128"}
        How shifted chunk ids are hashed.
    minishard_index_encoding, data_encoding : {"raw", "gzip"}
        Encodings of the minishard indexes and of the chunks' bytes.
    """

    preshift_bits: int
    minishard_bits: int
    shard_bits: int
    hash: str = "identity"
    minishard_index_encoding: str = "gzip"
    data_encoding: str = "raw"

    def __post_init__(self) -> None:
        fix = "See the neuroglancer_uint64_sharded_v1 specification"
        for name in ("preshift_bits", "minishard_bits", "shard_bits"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 64:
                raise InvalidArgumentError(
                    "sharding", f"{name} must be an integer in [0, 64], got {value!r}", fix
                )
        if self.minishard_bits + self.shard_bits > 64:
            raise InvalidArgumentError(
                "sharding",
                f"minishard_bits + shard_bits is {self.minishard_bits + self.shard_bits}, "
                "more than the 64 bits of a hashed id",
                fix,
            )
        if self.hash not in HASHES:
            raise InvalidArgumentError(
                "sharding", f"hash {self.hash!r} is not one of {HASHES}", fix
            )
        for name in ("minishard_index_encoding", "data_encoding"):
            if getattr(self, name) not in ENCODINGS:
                raise InvalidArgumentError(
                    "sharding", f"{name} {getattr(self, name)!r} is not one of {ENCODINGS}", fix
                )

    @classmethod
    def from_json(cls, document: Any) -> PrecomputedSharding:
        """Read a ``sharding`` JSON object (as in a scale of an ``info`` file).

        Raises
        ------
        shardpipe.errors.InvalidArgumentError
            For a document that is not a valid ``neuroglancer_uint64_sharded_v1`` object.
        """
        fix = f'Pass {{"@type": "{SHARDING_TYPE}", "preshift_bits": ..., "hash": ..., ...}}'
        if not isinstance(document, Mapping) or document.get("@type") != SHARDING_TYPE:
            raise InvalidArgumentError(
                "sharding", f"expected a {SHARDING_TYPE} object, got {document!r}", fix
            )
        known = {
            "@type",
            "preshift_bits",
            "minishard_bits",
            "shard_bits",
            "hash",
            "minishard_index_encoding",
            "data_encoding",
        }
        if unknown := sorted(set(document) - known):
            raise InvalidArgumentError("sharding", f"unknown members {unknown}", fix)
        missing = [k for k in ("preshift_bits", "minishard_bits", "shard_bits", "hash")]
        if absent := [k for k in missing if k not in document]:
            raise InvalidArgumentError("sharding", f"missing members {absent}", fix)
        return cls(
            preshift_bits=document["preshift_bits"],
            minishard_bits=document["minishard_bits"],
            shard_bits=document["shard_bits"],
            hash=document["hash"],
            minishard_index_encoding=document.get("minishard_index_encoding", "raw"),
            data_encoding=document.get("data_encoding", "raw"),
        )

    def to_json(self) -> dict[str, Any]:
        """The ``sharding`` JSON object."""
        return {
            "@type": SHARDING_TYPE,
            "preshift_bits": self.preshift_bits,
            "hash": self.hash,
            "minishard_bits": self.minishard_bits,
            "shard_bits": self.shard_bits,
            "minishard_index_encoding": self.minishard_index_encoding,
            "data_encoding": self.data_encoding,
        }

    # -- where a chunk goes ----------------------------------------------------------
    def hashed(self, ids: np.ndarray) -> np.ndarray:
        """The hashed (shifted) ids, ``uint64``."""
        shifted = np.asarray(ids, dtype=np.uint64) >> np.uint64(min(self.preshift_bits, 63))
        if self.preshift_bits == 64:
            shifted = np.zeros_like(shifted)
        if self.hash == "identity":
            return shifted
        import mmh3

        low = (1 << 64) - 1
        return np.array(
            [
                mmh3.hash128(struct.pack("<Q", int(v)), 0, x64arch=False, signed=False) & low
                for v in shifted
            ],
            dtype=np.uint64,
        )

    def locate(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Shard and minishard numbers of chunk ``ids``."""
        hashed = self.hashed(ids)
        minishard = hashed & np.uint64((1 << self.minishard_bits) - 1)
        shard = (hashed >> np.uint64(self.minishard_bits)) & np.uint64((1 << self.shard_bits) - 1)
        return shard, minishard

    def shard_key(self, shard: int) -> str:
        """The file name of shard number ``shard``: lowercase hex, zero-padded, ``.shard``."""
        digits = -(-self.shard_bits // 4)
        return f"{shard:0{digits}x}.shard" if digits else f"{shard:x}.shard"

    @property
    def index_nbytes(self) -> int:
        """Bytes of a shard's fixed-size shard index."""
        return ENTRY << self.minishard_bits

    # -- a whole shard ----------------------------------------------------------------
    def encode_data(self, data: Buffer) -> Buffer:
        """A chunk's bytes as a shard stores them (gzip'd with ``data_encoding="gzip"``)."""
        if self.data_encoding == "gzip":
            return gzip.compress(memoryview(data).cast("B"), compresslevel=GZIP_LEVEL, mtime=0)
        return data

    def encode_indexes(
        self, ids: np.ndarray, starts: np.ndarray, sizes: np.ndarray, *, data_stop: int
    ) -> tuple[bytes, bytes]:
        """The shard index and the minishard indexes of a shard holding chunks ``ids``.

        Parameters
        ----------
        ids, starts, sizes : numpy.ndarray
            Each chunk's id, the start of its (stored) bytes counted from the
            end of the shard index, and their length.
        data_stop : int
            Where the minishard indexes begin, counted from the end of the
            shard index: they follow the chunk data.

        Raises
        ------
        shardpipe.errors.ShardFormatError
            If the chunks of a minishard, in increasing id order, do not lie
            at increasing offsets (the format stores the gaps as unsigned
            deltas), or one lies past ``data_stop``.
        """
        ids = np.asarray(ids, dtype=np.uint64)
        starts = np.asarray(starts, dtype=np.uint64)
        sizes = np.asarray(sizes, dtype=np.uint64)
        _, minishards = self.locate(ids)
        order = np.lexsort((ids, minishards))
        ids, starts, sizes, minishards = ids[order], starts[order], sizes[order], minishards[order]
        if len(ids) and int((starts + sizes).max()) > data_stop:
            raise ShardFormatError(f"a chunk ends past the chunk data's end ({data_stop})")
        index = np.zeros((1 << self.minishard_bits, 2), dtype="<u8")
        tails: list[bytes] = []
        position = data_stop
        edges = np.flatnonzero(np.diff(minishards)) + 1
        for rows in np.split(np.arange(len(ids)), edges) if len(ids) else []:
            minishard = int(minishards[rows[0]])
            ends = starts[rows] + sizes[rows]
            if (starts[rows][1:] < ends[:-1]).any():
                raise ShardFormatError(
                    f"minishard {minishard}'s chunks do not lie in increasing id order"
                )
            table = np.zeros((3, len(rows)), dtype="<u8")
            table[0] = np.diff(ids[rows], prepend=np.uint64(0))
            table[1] = starts[rows] - np.concatenate(([np.uint64(0)], ends[:-1]))
            table[2] = sizes[rows]
            encoded = table.tobytes()
            if self.minishard_index_encoding == "gzip":
                encoded = gzip.compress(encoded, compresslevel=GZIP_LEVEL, mtime=0)
            index[minishard] = (position, position + len(encoded))
            tails.append(encoded)
            position += len(encoded)
        return index.tobytes(), b"".join(tails)

    def read_listing(self, read: RangeReader, shard_nbytes: int, *, max_chunks: int) -> Listing:
        """Every chunk a shard file's minishard indexes list, checked and bounded.

        Parameters
        ----------
        read : callable
            ``read(start, stop)`` returns those bytes of the file.
        shard_nbytes : int
            The file's size.
        max_chunks : int
            Most chunks the shard can hold (its grid's). A valid shard lists
            each chunk once and stores at least one byte for it, so its
            minishard indexes decode to at most 24 bytes per chunk, for at
            most ``min(max_chunks, bytes after the shard index)`` chunks:
            decoding stops there (a gzip bomb costs that much, no more).

        Raises
        ------
        shardpipe.errors.ShardFormatError
            If an index lies outside the file, does not decode, decodes to
            more than that bound, or lists a chunk outside the file or an id
            past ``2**64``.
        """
        head = self.index_nbytes
        if shard_nbytes < head:
            raise ShardFormatError(
                f"{shard_nbytes} bytes, shorter than its {head}-byte shard index"
            )
        body = shard_nbytes - head
        most = min(max_chunks, body)
        budget = MINISHARD_ENTRY * most  # decoded bytes left for this shard's indexes
        entries = np.frombuffer(read(0, head), dtype="<u8").reshape(-1, 2)
        parts: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]] = []
        for minishard in np.flatnonzero(entries[:, 0] != entries[:, 1]).tolist():
            start, end = (int(v) for v in entries[minishard])
            if not start < end <= body:
                raise ShardFormatError(
                    f"minishard {minishard}'s index [{start}, {end}) lies outside "
                    f"the file's {body} bytes after the shard index"
                )
            bound = f"(24 bytes per chunk, for at most {most:,} chunks in this shard)"
            if self.minishard_index_encoding == "gzip":
                try:
                    raw = gunzip(read(head + start, head + end), budget)
                except ChunkDecodeError as err:
                    raise ShardFormatError(f"minishard {minishard}'s index: {err} {bound}") from err
            elif end - start > budget:
                raise ShardFormatError(
                    f"minishard {minishard}'s index has {end - start:,} bytes, more than the "
                    f"{budget:,} left {bound}"
                )
            else:
                raw = read(head + start, head + end)
            budget -= len(raw)
            ids, starts, stops = _decode_minishard(raw, minishard, head, shard_nbytes)
            parts.append((minishard, ids, starts, stops))
        return Listing.of(parts)

    def read_minishards(
        self, read: RangeReader, shard_nbytes: int, *, max_chunks: int | None = None
    ) -> dict[int, list[tuple[int, int, int]]]:
        """Per minishard listed in a shard file, its chunks: ``(id, start, stop)`` in the file.

        :meth:`read_listing` as Python lists (``max_chunks`` None: bounded
        by the file's size alone).

        Raises
        ------
        shardpipe.errors.ShardFormatError
            If an index lies outside the file, does not decode, or points outside it.
        """
        listing = self.read_listing(
            read, shard_nbytes, max_chunks=shard_nbytes if max_chunks is None else max_chunks
        )
        found: dict[int, list[tuple[int, int, int]]] = {}
        for row in zip(*(a.tolist() for a in listing.columns()), strict=True):
            found.setdefault(row[0], []).append(row[1:])
        return found

    def decode_chunk(self, data: bytes, limit: int) -> bytes:
        """A chunk's bytes as stored in a shard, without the shard's ``data_encoding``.

        ``limit`` bounds what gzip'd data may inflate to (the most bytes the
        chunk's encoding can take).

        Raises
        ------
        shardpipe.errors.ChunkDecodeError
            If gzip'd data do not inflate, or inflate past ``limit``.
        """
        return gunzip(data, limit) if self.data_encoding == "gzip" else data


@dataclass(frozen=True)
class Listing:
    """The chunks a shard file lists, in minishard order, one entry per listed chunk.

    Attributes
    ----------
    minishards, ids, starts, stops : numpy.ndarray
        ``uint64``: the minishard that lists the chunk, its id, and the byte
        range of its data in the file.
    """

    minishards: np.ndarray
    ids: np.ndarray
    starts: np.ndarray
    stops: np.ndarray

    @classmethod
    def of(cls, parts: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]]) -> Listing:
        """Join ``(minishard, ids, starts, stops)`` of each minishard."""
        if not parts:
            empty = np.zeros(0, dtype=np.uint64)
            return cls(empty, empty, empty, empty)
        return cls(
            np.concatenate([np.full(len(p[1]), p[0], dtype=np.uint64) for p in parts]),
            *(np.concatenate([p[k] for p in parts]) for k in (1, 2, 3)),
        )

    def columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(minishards, ids, starts, stops)``."""
        return self.minishards, self.ids, self.starts, self.stops


def _decode_minishard(
    raw: bytes, minishard: int, head: int, shard_nbytes: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ids and ``[start, stop)`` in the file of each chunk a decoded minishard index lists.

    Vectorised in uint64, with every sum that could wrap checked: ids and
    offsets are delta-encoded with unsigned deltas, so both only grow; a
    running sum that falls is one that passed ``2**64``.
    """
    if len(raw) % MINISHARD_ENTRY:
        raise ShardFormatError(
            f"minishard {minishard}'s index has {len(raw)} bytes, not a multiple of 24"
        )
    table = np.frombuffer(raw, dtype="<u8").reshape(3, -1).astype(np.uint64)
    ids = np.cumsum(table[0], dtype=np.uint64)
    if (ids[1:] < ids[:-1]).any():
        raise ShardFormatError(f"minishard {minishard}'s index lists chunk ids past 2**64")
    body = np.uint64(shard_nbytes - head)
    gaps, sizes = table[1], table[2]
    past = (gaps > body) | (sizes > body)
    ends = np.cumsum(np.where(past, 0, gaps + sizes), dtype=np.uint64)  # each term < 2**64
    past |= np.concatenate(([False], ends[1:] < ends[:-1])) | (ends > body)
    if past.any():
        k = int(np.argmax(past))
        raise ShardFormatError(
            f"minishard {minishard}'s index lists chunk {int(ids[k])} ending past the file's "
            f"{shard_nbytes} bytes"
        )
    starts = ends - sizes + np.uint64(head)
    return ids, starts, ends + np.uint64(head)
