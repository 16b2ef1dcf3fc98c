"""Precomputed shard files behind the shard-format protocol (:class:`~.base.ShardFormat`).

Two siblings of :class:`~shardpipe.formats.zarr_sharding.ZarrShardingFormat`,
both laying a shard file out as :mod:`shardpipe.formats.precomputed` says
(the shard index as the head, the chunks, the minishard indexes as the
tail); they differ in which chunks a shard holds, and so in what a slot is:

* :class:`BoxShards`: identity-hashed shards that are aligned boxes of
  chunks (:func:`shardpipe.core.precomputed_plan.box_bits`). A chunk's slot
  is the low ``slot_bits`` bits of its id, so one value describes every
  shard of the scale, and slots in increasing order are ids in increasing
  order.
* :class:`ScatteredShard`: one shard whose chunks are scattered over the
  volume (murmurhash, or identity bits that do not make boxes). Its slots
  are the positions of its member ids, increasing.

Either way, laying chunks out in slot order lists every minishard's chunks
at increasing offsets in increasing id order, as the format's delta
encoding needs. A shard is named by ``(number,)``, its shard number.

Readers of shard files someone else wrote (``verify``) use
:class:`ListedShard`: one shard described by what its own minishard
indexes list (:func:`listed_shard_format`), so that reading it never
enumerates the grid, whatever its size, and decodes its indexes within the
bound of :meth:`~shardpipe.formats.precomputed.PrecomputedSharding.read_listing`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from shardpipe.core.grid import Coords
from shardpipe.core.morton import low_bits_box, morton_bit_dims, morton_coords, morton_ids
from shardpipe.core.precomputed_plan import ScaleGrid, ShardChunks, box_bits
from shardpipe.errors import ShardFormatError
from shardpipe.formats.base import RangeReader, ShardIndex
from shardpipe.formats.precomputed import Listing, PrecomputedSharding


@dataclass(frozen=True, eq=False)
class PrecomputedShards(ABC):
    """A precomputed shard format: what both layouts share (see the module docstring).

    The head, the tail and the index read back are the same for both; each
    layout says how slots map to chunk ids (:meth:`ids`, :meth:`slots`).
    """

    sharding: PrecomputedSharding
    grid: tuple[int, ...]

    @property
    @abstractmethod
    def n_slots(self) -> int:
        """Number of slots of a shard."""

    @abstractmethod
    def slot(self, local: Coords) -> int:
        """Slot of the chunk at local coordinates ``local`` of a shard."""

    @abstractmethod
    def ids(self, shard: Coords, slots: np.ndarray) -> np.ndarray:
        """Chunk ids (``uint64``) of ``slots`` of ``shard``."""

    @abstractmethod
    def slots(self, shard: Coords, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Slots of chunk ``ids`` in ``shard``, and which ids are chunks of it at all."""

    @property
    def max_chunks(self) -> int:
        """Most chunks a shard file of this format can list (bounds its minishard indexes)."""
        return self.n_slots

    def _listing(self, read: RangeReader, shard_nbytes: int) -> Listing:
        """What the shard file's minishard indexes list (read, bounded by :attr:`max_chunks`)."""
        return self.sharding.read_listing(read, shard_nbytes, max_chunks=self.max_chunks)

    def key(self, shard: Coords) -> str:
        """The shard file's name (shard ``(number,)``)."""
        return self.sharding.shard_key(_number(shard))

    @property
    def has_tail(self) -> bool:
        """True: the minishard indexes follow the chunks."""
        return True

    @property
    def chunks_in_any_order(self) -> bool:
        """False: a minishard's chunks lie at increasing offsets, as their ids increase."""
        return False

    def index_nbytes(self) -> int:
        """Bytes of the shard index plus (at most, before gzip) the minishard indexes."""
        return self.sharding.index_nbytes + 24 * self.n_slots

    def head_nbytes(self, min_part_size: int = 0) -> int:
        """The shard index, padded to ``min_part_size`` (chunk offsets skip the padding)."""
        return max(self.sharding.index_nbytes, min_part_size)

    def encode_index(
        self, index: ShardIndex, *, shard: Coords, head_nbytes: int, data_nbytes: int
    ) -> tuple[bytes, bytes]:
        """``(head, tail)``: the shard index padded to ``head_nbytes``, the minishard indexes.

        Raises
        ------
        shardpipe.errors.ShardFormatError
            If a minishard's chunks do not lie in increasing id order (lay
            chunks out in slot order), or the head cannot hold the shard index.
        """
        table = self.sharding.index_nbytes
        if head_nbytes < table:
            raise ShardFormatError(
                f"a head of {head_nbytes} bytes cannot hold a {table}-byte shard index"
            )
        stored = np.flatnonzero(index.stored())
        starts = index.entries[stored, 0] - np.uint64(table)
        shard_index, tail = self.sharding.encode_indexes(
            self.ids(shard, stored),
            starts,
            index.entries[stored, 1],
            data_stop=head_nbytes - table + data_nbytes,
        )
        return shard_index + bytes(head_nbytes - table), tail

    def read_index(
        self, read: RangeReader, shard_nbytes: int, *, shard: Coords
    ) -> tuple[ShardIndex, tuple[int, int]]:
        """Read the shard and minishard indexes of ``shard``; return the index by slot.

        Returns the index and the byte range of the shard index. Besides
        what :meth:`~shardpipe.formats.precomputed.PrecomputedSharding.read_listing` checks, every
        listed chunk must be a chunk of this shard, listed once, in the minishard
        its id hashes to, and apart from every minishard index.

        Raises
        ------
        shardpipe.errors.ShardFormatError
            Naming the first problems found.
        """
        found, ids, starts, stops = self._listing(read, shard_nbytes).columns()
        slots, member = self.slots(shard, ids)
        _, minishard = self.sharding.locate(ids)
        unique, counts = np.unique(ids, return_counts=True)
        misplaced = np.flatnonzero(found != minishard)
        repeated = np.flatnonzero(counts > 1)
        problems = [f"chunk {int(i)} is not a chunk of this shard" for i in ids[~member][:3]]
        problems += [
            f"chunk {int(ids[k])} is listed in minishard {int(found[k])} but hashes to "
            f"minishard {int(minishard[k])}"
            for k in misplaced[:3]
        ]
        problems += [
            f"chunk {int(unique[k])} is listed {int(counts[k])} times" for k in repeated[:3]
        ]
        overlapping = self._on_minishard_indexes(read, ids, starts, stops)
        problems += [f"chunk {int(i)} overlaps a minishard index" for i in overlapping[:3]]
        count = int((~member).sum()) + len(misplaced) + len(repeated) + len(overlapping)
        if count:
            more = f"; and {count - 3} more" if count > 3 else ""
            raise ShardFormatError("; ".join(problems[:3]) + more)
        index = ShardIndex.empty(self.n_slots)
        index.entries[slots, 0] = starts
        index.entries[slots, 1] = stops - starts
        return index, (0, self.sharding.index_nbytes)

    def _on_minishard_indexes(
        self, read: RangeReader, ids: np.ndarray, starts: np.ndarray, stops: np.ndarray
    ) -> np.ndarray:
        """The ids of the chunks whose bytes overlap a minishard index."""
        table = self.sharding.index_nbytes
        ranges = np.frombuffer(read(0, table), dtype="<u8").reshape(-1, 2).astype(np.uint64)
        ranges = ranges[ranges[:, 0] < ranges[:, 1]] + np.uint64(table)
        if not len(ranges) or not len(ids):
            return ids[:0]
        ranges = ranges[np.argsort(ranges[:, 0])]
        reach = np.maximum.accumulate(ranges[:, 1])
        last = np.searchsorted(ranges[:, 0], stops, side="left") - 1  # last index starting before
        hit = (last >= 0) & (reach[np.maximum(last, 0)] > starts)
        return ids[hit]


@dataclass(frozen=True, eq=False)
class BoxShards(PrecomputedShards):
    """Every shard of an identity-hashed scale whose shards are aligned boxes of chunks.

    Parameters
    ----------
    sharding : PrecomputedSharding
        The scale's sharding spec (identity hash).
    grid : tuple of int
        Chunks per dimension.
    slot_bits : int
        Low id bits a shard's box spans: ``preshift_bits + minishard_bits``,
        at most the ids' length.
    """

    slot_bits: int

    @property
    def n_slots(self) -> int:
        """``2**slot_bits``: one slot per id a shard can hold."""
        return 1 << self.slot_bits

    @property
    def chunks_per_shard(self) -> tuple[int, ...]:
        """The box of chunks one shard spans (edge shards are clipped by the grid)."""
        return low_bits_box(self.grid, self.slot_bits)

    @property
    def max_chunks(self) -> int:
        """The ids a shard spans, or fewer: the grid's chunks."""
        return min(self.n_slots, math.prod(self.grid))

    def slot(self, local: Coords) -> int:
        """The low id bits of the chunk at ``local`` inside its shard's box."""
        return int(morton_ids(np.array([local]), self.grid)[0])

    def ids(self, shard: Coords, slots: np.ndarray) -> np.ndarray:
        """``(number << slot_bits) | slot``."""
        return (np.uint64(_number(shard)) << np.uint64(self.slot_bits)) | slots.astype(np.uint64)

    def slots(self, shard: Coords, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Low bits of ``ids``; members are the grid's chunks with the shard's high bits."""
        ids = ids.astype(np.uint64)
        bits = np.uint64(self.slot_bits)
        mask = np.uint64((1 << self.slot_bits) - 1)
        member = ((ids >> bits) == np.uint64(_number(shard))) & _in_grid(ids, self.grid)
        return (ids & mask).astype(np.intp), member


@dataclass(frozen=True, eq=False)
class ScatteredShard(PrecomputedShards):
    """One shard whose chunks are scattered: the format of shard ``(number,)`` only.

    Its chunks have no box: they form a one-dimensional list, the members
    in increasing id order, and the chunk at local coordinates ``(k,)`` is
    the ``k``-th member.

    Parameters
    ----------
    sharding : PrecomputedSharding
        The scale's sharding spec.
    grid : tuple of int
        Chunks per dimension.
    number : int
        The shard's number.
    members : numpy.ndarray
        The ids (``uint64``) of the chunks the shard holds, increasing.
    """

    number: int
    members: np.ndarray

    @property
    def n_slots(self) -> int:
        """One slot per member."""
        return len(self.members)

    def slot(self, local: Coords) -> int:
        """The position ``local[0]`` among the members."""
        return int(local[0])

    def ids(self, shard: Coords, slots: np.ndarray) -> np.ndarray:
        """The members at ``slots``."""
        self._check(shard)
        ids: np.ndarray = np.asarray(self.members, dtype=np.uint64)[slots]
        return ids

    def slots(self, shard: Coords, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Positions of ``ids`` among the members."""
        self._check(shard)
        members = np.asarray(self.members, dtype=np.uint64)
        ids = ids.astype(np.uint64)
        at = np.searchsorted(members, ids)
        member = at < len(members)
        member[member] = members[at[member]] == ids[member]
        return np.where(member, at, 0).astype(np.intp), member

    def _check(self, shard: Coords) -> None:
        if _number(shard) != self.number:
            raise ShardFormatError(
                f"this format describes shard {self.number} only, not shard {_number(shard)}"
            )


def shard_format_of(
    scale: ScaleGrid, sharding: PrecomputedSharding, shard: ShardChunks
) -> PrecomputedShards:
    """The format of ``shard``'s file: the scale's boxes, or that one scattered shard."""
    low = box_bits(scale, sharding)
    if low is not None:
        return BoxShards(sharding, scale.grid, min(low, scale.id_bits))
    return ScatteredShard(sharding, scale.grid, shard.shard, shard.ids)


@dataclass(frozen=True, eq=False)
class ListedShard(ScatteredShard):
    """One shard file as its own minishard indexes describe it (for readers: ``verify``).

    Its members are the listed ids that are chunks of the grid and hash to
    this shard: found from the file, never by hashing the grid's chunks, so
    reading a shard costs what the file lists (bounded by its size), for
    grids of any size. Listed ids that are not members are reported by
    :meth:`PrecomputedShards.read_index` as chunks of another shard.

    Parameters
    ----------
    listing : Listing
        What the file lists, already read.
    """

    listing: Listing

    def _listing(self, read: RangeReader, shard_nbytes: int) -> Listing:
        return self.listing


def listed_shard_format(
    scale: ScaleGrid, sharding: PrecomputedSharding, number: int, read: RangeReader, nbytes: int
) -> ListedShard:
    """The format of shard file ``number`` (``nbytes`` long), read from its own listing.

    Raises
    ------
    shardpipe.errors.ShardFormatError
        If its indexes do not decode (within the bound of
        :meth:`~shardpipe.formats.precomputed.PrecomputedSharding.read_listing`).
    """
    low = box_bits(scale, sharding)
    most = math.prod(scale.grid)
    if low is not None:
        most = min(most, 1 << min(low, scale.id_bits))
    listing = sharding.read_listing(read, nbytes, max_chunks=most)
    ids = np.unique(listing.ids)
    ids = ids[_in_grid(ids, scale.grid)]
    shards, _ = sharding.locate(ids)
    members = ids[shards == np.uint64(number)]
    return ListedShard(sharding, scale.grid, number, members, listing)


def _number(shard: Coords) -> int:
    """The shard number of precomputed shard coordinates ``(number,)``."""
    if len(shard) != 1:
        raise ShardFormatError(f"a precomputed shard is named (number,), not {shard!r}")
    return int(shard[0])


def _in_grid(ids: np.ndarray, grid: tuple[int, ...]) -> np.ndarray:
    """Which ``ids`` are compressed Morton codes of chunks inside ``grid``."""
    n_bits = len(morton_bit_dims(grid))
    short = ids < np.uint64(1 << n_bits) if n_bits < 64 else np.ones(len(ids), dtype=bool)
    coords = morton_coords(np.where(short, ids, np.uint64(0)), grid)
    return short & (coords < np.array(grid)).all(axis=1)
