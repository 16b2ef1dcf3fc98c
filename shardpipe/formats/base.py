"""The shard-format protocol and what every format shares.

A *shard format* says how the encoded inner chunks of one shard, plus an
index of where each lies, become the bytes of one storage object, and under
which key that object lives. Writers and readers work only through
:class:`ShardFormat`, so formats are siblings: zarr's ``sharding_indexed``
(:mod:`shardpipe.formats.zarr_sharding`) and the Neuroglancer precomputed
shard file (:mod:`shardpipe.formats.precomputed_shards`).

The shape every format shares::

    | head | chunk data, in parts, possibly with unused gaps | tail |

* the **head** has a size known before any chunk is written
  (:meth:`ShardFormat.head_nbytes`): the index when it goes first (zarr,
  ``index_location="start"``), a fixed-size shard index (Neuroglancer), or
  nothing;
* chunk data is written part by part by any number of tasks; each reports
  where its chunks lie in a :class:`PartManifest`;
* the **tail** is made last (:meth:`ShardFormat.encode_index`), from the
  offsets of all chunks: the index when it goes last, minishard indexes
  (Neuroglancer), or nothing.

Chunks are addressed by *slot*: the position of an inner chunk in the
shard's index (:meth:`ShardFormat.slot`). A format whose index names
chunks by an id (Neuroglancer's minishard indexes list absolute chunk ids)
maps slots to ids itself, which is why encoding and reading an index take
the shard's coordinates: the same slots mean other chunks in another
shard. Nothing here does I/O.
"""

from __future__ import annotations

import itertools
from collections.abc import Buffer, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from shardpipe.codec.plain_chain import EncodedChunk
from shardpipe.core.grid import Coords
from shardpipe.errors import ShardFormatError

EMPTY = np.uint64(2**64 - 1)
"""Offset and nbytes of an index slot that holds no data."""

RangeReader = Callable[[int, int], bytes]
"""Reads bytes ``[start, stop)`` of one shard object."""


def exact_total(values: np.ndarray) -> int:
    """The sum of ``uint64`` values (index lengths, offsets) as a Python int: no wrap at 2**64.

    A ``uint64`` sum of forged lengths wraps around (four lengths of 2**62
    add up to 0). Summed in two halves of 32 bits each, whose sums stay
    below 2**64 for fewer than 2**32 values (a shard has at most 2**26
    slots), and joined in Python, the total is exact whatever the values.
    """
    wide = np.asarray(values, dtype=np.uint64)
    low = int((wide & np.uint64(0xFFFF_FFFF)).sum(dtype=np.uint64))
    high = int((wide >> np.uint64(32)).sum(dtype=np.uint64))
    return (high << 32) + low


@dataclass
class ShardIndex:
    """Offsets and lengths of the inner chunks of one shard, by slot.

    Parameters
    ----------
    entries : numpy.ndarray
        ``uint64`` array of shape ``(n_slots, 2)``: column 0 the offset,
        column 1 the nbytes; both :data:`EMPTY` for a slot without data.
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


@runtime_checkable
class ShardFormat(Protocol):
    """How one array's shards are laid out and named.

    Every format is a frozen value (picklable, shipped to workers).
    """

    @property
    def n_slots(self) -> int:
        """Number of inner chunk slots of a shard."""
        ...

    def slot(self, local: Coords) -> int:
        """Index slot of the inner chunk at local grid coordinates ``local``."""
        ...

    def key(self, shard: Coords) -> str:
        """Key of the shard object at grid coordinates ``shard``, relative to the array."""
        ...

    @property
    def has_tail(self) -> bool:
        """Whether anything follows the chunk data (the last part is then not last)."""
        ...

    @property
    def chunks_in_any_order(self) -> bool:
        """Whether chunks, and so the parts of a shard, may lie in any order.

        True where the index gives each chunk's offset; False where the
        format wants them in increasing offsets (precomputed minishards).
        """
        ...

    def head_nbytes(self, min_part_size: int = 0) -> int:
        """Bytes before the first chunk when a shard is written in parts.

        ``min_part_size`` is the store's smallest part (the head is then
        padded to it, when it is not empty).
        """
        ...

    def encode_index(
        self, index: ShardIndex, *, shard: Coords, head_nbytes: int, data_nbytes: int
    ) -> tuple[bytes, bytes]:
        """Return ``(head, tail)`` of shard ``shard`` whose chunks lie as ``index`` says.

        ``head`` has exactly ``head_nbytes`` bytes (the offsets in ``index``
        already count them); the chunk data (padding included) takes the
        next ``data_nbytes`` bytes, and ``tail`` follows it.
        """
        ...

    def index_nbytes(self) -> int:
        """Encoded size of the index (without padding)."""
        ...

    def read_index(
        self, read: RangeReader, shard_nbytes: int, *, shard: Coords
    ) -> tuple[ShardIndex, tuple[int, int]]:
        """Read and decode the index of shard ``shard``, an object of ``shard_nbytes`` bytes.

        Returns the index and the byte range the index occupies (for a
        format with more than one index, the first; the format checks that
        no chunk overlaps the others).

        Raises
        ------
        shardpipe.errors.ShardFormatError
            If the bytes are not a valid index.
        """
        ...


def entry_problems(
    index: ShardIndex, shard_nbytes: int, index_range: tuple[int, int], *, most: int = 3
) -> tuple[list[str], int]:
    """Find index entries that no valid shard of ``shard_nbytes`` bytes can have.

    An entry is wrong when only one of its offset and nbytes is the empty
    marker, when its bytes do not lie inside the object (``offset + nbytes``
    past the end, or wrapping around 2**64), when they overlap the index, or
    when they overlap another chunk's. Vectorised: an index of millions of
    entries is checked without a Python loop over them.

    Parameters
    ----------
    index : ShardIndex
        The decoded index.
    shard_nbytes : int
        Size of the shard object.
    index_range : tuple of int
        ``[start, stop)`` of the encoded index inside the object.
    most : int
        Describe at most this many problems.

    Returns
    -------
    problems : list of str
        The first ``most`` problems, each naming its slot(s).
    count : int
        How many problems there are in all.
    """
    entries = index.entries
    offsets, lengths = entries[:, 0], entries[:, 1]
    size = np.uint64(max(0, shard_nbytes))
    half = (offsets == EMPTY) != (lengths == EMPTY)
    stored = (offsets != EMPTY) & (lengths != EMPTY)
    # offset + nbytes <= size, written so that nothing wraps around 2**64
    outside = stored & ((lengths > size) | (offsets > size - np.minimum(lengths, size)))
    inside = stored & ~outside
    start, stop = np.uint64(index_range[0]), np.uint64(index_range[1])
    slots = np.flatnonzero(inside)
    starts = offsets[slots]
    stops = starts + lengths[slots]
    on_index = (starts < stop) & (stops > start)
    order = np.lexsort((stops, starts))  # by start, then stop: an empty chunk overlaps nothing
    ends = np.maximum.accumulate(stops[order]) if len(order) else stops
    clash = np.flatnonzero(ends[:-1] > starts[order][1:])
    problems: list[str] = []
    count = int(half.sum()) + int(outside.sum()) + int(on_index.sum()) + len(clash)
    for slot in np.flatnonzero(half)[:most]:
        problems.append(
            f"slot {slot}: only one of offset {int(offsets[slot])} and nbytes "
            f"{int(lengths[slot])} is the empty marker 2**64-1"
        )
    for slot in np.flatnonzero(outside)[:most]:
        first, n = int(offsets[slot]), int(lengths[slot])
        problems.append(
            f"slot {slot}: bytes [{first}, {first + n}) lie outside the {shard_nbytes}-byte shard"
        )
    for i in np.flatnonzero(on_index)[:most]:
        problems.append(
            f"slot {slots[i]}: bytes [{int(starts[i])}, {int(stops[i])}) overlap the index at "
            f"[{index_range[0]}, {index_range[1]})"
        )
    for i in clash[:most]:
        problems.append(f"slot {slots[order[i + 1]]} overlaps the bytes of an earlier chunk")
    return problems[:most], count


def check_entries(index: ShardIndex, shard_nbytes: int, index_range: tuple[int, int]) -> None:
    """Raise unless every entry of ``index`` is empty or lies alone inside the object.

    Raises
    ------
    ShardFormatError
        Describing the first problems :func:`entry_problems` finds.
    """
    problems, count = entry_problems(index, shard_nbytes, index_range)
    if count:
        more = f"; and {count - len(problems)} more" if count > len(problems) else ""
        raise ShardFormatError(
            f"{count} bad index entr{'y' if count == 1 else 'ies'}: {'; '.join(problems)}{more}"
        )


def read_checked_index(
    shard_format: ShardFormat, read: RangeReader, shard_nbytes: int, key: str, *, shard: Coords
) -> tuple[ShardIndex, tuple[int, int]]:
    """Read the index of the shard at ``key`` and check every entry before any is used.

    For code that slices or copies chunks by their entries (updates,
    compaction, ``info``): an entry it returns lies inside the object,
    apart from the index and from every other chunk.

    Raises
    ------
    ShardFormatError
        Naming ``key``, when the index does not decode or an entry is wrong.
    """
    try:
        index, where = shard_format.read_index(read, shard_nbytes, shard=shard)
        if index.entries.shape != (shard_format.n_slots, 2):
            raise ShardFormatError(
                f"the index has {index.entries.shape[0]} entries, the shard "
                f"{shard_format.n_slots} slots"
            )
        check_entries(index, shard_nbytes, where)
    except ShardFormatError as err:
        raise ShardFormatError(f"shard {key!r}: {err}") from err
    return index, where


def lay_out_part(
    encoded: Iterable[tuple[int, EncodedChunk]], *, min_size: int = 0
) -> tuple[list[Buffer], PartManifest]:
    """Lay encoded chunks back to back and describe where each one landed.

    Parameters
    ----------
    encoded : iterable of (slot, bytes-like or tuple of bytes-like)
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
    manifest = PartManifest()
    buffers: list[Buffer] = list(_laid_out(encoded, manifest))
    if 0 < manifest.size < min_size:
        buffers.append(bytes(min_size - manifest.size))
        manifest.size = min_size
    return buffers, manifest


def _laid_out(
    encoded: Iterable[tuple[int, EncodedChunk]], manifest: PartManifest
) -> Iterator[Buffer]:
    """Yield each chunk's buffers, recording in ``manifest`` where it lands (back to back)."""
    slots, offsets, sizes = manifest.slots, manifest.offsets, manifest.nbytes
    for slot, data in encoded:
        if isinstance(data, tuple):
            n = sum(memoryview(b).nbytes for b in data)
        else:
            n = memoryview(data).nbytes
        slots.append(slot)
        offsets.append(manifest.size)
        sizes.append(n)
        manifest.size += n
        if isinstance(data, tuple):
            yield from data
        else:
            yield data


def stamp_index(n_slots: int, parts: Sequence[PartManifest], starts: Sequence[int]) -> ShardIndex:
    """Build the index of a shard whose ``parts`` start at byte offsets ``starts``.

    Parameters
    ----------
    n_slots : int
        Number of inner chunk slots in the shard.
    parts : sequence of PartManifest
        The shard's parts.
    starts : sequence of int
        Byte offset of each part in the shard (the head counted).
    """
    index = ShardIndex.empty(n_slots)
    for part, base in zip(parts, starts, strict=True):
        if part.slots:
            slots = np.asarray(part.slots, dtype=np.intp)
            index.entries[slots, 0] = np.asarray(part.offsets, dtype=np.uint64) + np.uint64(base)
            index.entries[slots, 1] = np.asarray(part.nbytes, dtype=np.uint64)
    return index


def back_to_back(parts: Sequence[PartManifest]) -> list[int]:
    """Where each of ``parts`` starts when they lie one after the other, from 0."""
    return list(itertools.accumulate((p.size for p in parts[:-1]), initial=0)) if parts else []


def assemble_shard(
    shard_format: ShardFormat, encoded: Iterable[tuple[int, EncodedChunk]], *, shard: Coords
) -> list[Buffer]:
    """Return the buffers whose concatenation is the complete shard ``shard``.

    Parameters
    ----------
    shard_format : ShardFormat
        The format.
    encoded : iterable of (slot, bytes-like or tuple of bytes-like)
        Index slot and encoded bytes of every stored inner chunk, in the
        order they are to lie.
    shard : tuple of int
        The shard's coordinates.
    """
    return list(stream_shard(shard_format, encoded, shard=shard).buffers())


@dataclass
class StreamedShard:
    """A shard laid out as its encoded chunks are produced (:func:`stream_shard`).

    Attributes
    ----------
    shard_format : ShardFormat
        The format.
    encoded : iterable of (slot, bytes-like or tuple of bytes-like)
        The stored chunks, produced on demand.
    shard : tuple of int
        The shard's coordinates.
    manifest : PartManifest
        Where the chunks produced so far lie (after the head); complete once
        :meth:`buffers` is exhausted.
    """

    shard_format: ShardFormat
    encoded: Iterable[tuple[int, EncodedChunk]]
    shard: Coords
    manifest: PartManifest = field(default_factory=PartManifest)

    def buffers(self) -> Iterator[Buffer]:
        """Yield the shard's non-empty buffers in order, asking for each chunk when it is due.

        Without a head, each chunk is yielded as soon as it is encoded and the
        index follows. A format whose head holds the index needs every chunk
        before its first byte: all are produced first.
        """
        laid_out = _laid_out(self.encoded, self.manifest)
        if self.shard_format.head_nbytes():
            chunks = list(laid_out)
            head, tail = self._index_around()
            yield from (b for b in (head, *chunks, tail) if memoryview(b).nbytes)
            return
        yield from laid_out
        _, tail = self._index_around()
        if tail:
            yield tail

    @property
    def chunks(self) -> int:
        """Chunks laid out so far."""
        return len(self.manifest.slots)

    def _index_around(self) -> tuple[bytes, bytes]:
        """Head and tail of the shard, once every chunk is laid out."""
        return encode_stamped(self.shard_format, [self.manifest], shard=self.shard, min_part_size=0)


def encode_stamped(
    shard_format: ShardFormat,
    parts: Sequence[PartManifest],
    *,
    shard: Coords,
    min_part_size: int,
    starts: Sequence[int] | None = None,
    data_nbytes: int | None = None,
) -> tuple[bytes, bytes]:
    """Head and tail of shard ``shard`` made of ``parts``, which follow the head.

    ``min_part_size`` is the store's smallest part, to which the head is
    padded. ``starts`` says where each part starts, counted from the end of
    the head, and ``data_nbytes`` how many bytes lie between the head and the
    tail; by default the parts lie back to back, in order.
    """
    head_nbytes = shard_format.head_nbytes(min_part_size)
    starts = back_to_back(parts) if starts is None else starts
    index = stamp_index(shard_format.n_slots, parts, [head_nbytes + s for s in starts])
    data = sum(p.size for p in parts) if data_nbytes is None else data_nbytes
    return shard_format.encode_index(index, shard=shard, head_nbytes=head_nbytes, data_nbytes=data)


def stream_shard(
    shard_format: ShardFormat, encoded: Iterable[tuple[int, EncodedChunk]], *, shard: Coords
) -> StreamedShard:
    """Lay out shard ``shard`` lazily from ``encoded`` (slot, bytes) pairs, produced on demand.

    Use ``stream_shard(...).buffers()`` as the argument of
    :meth:`~shardpipe.storage.base.ShardStore.put_streamed`: encoding the
    next chunk and writing the previous one then overlap.
    """
    return StreamedShard(shard_format, encoded, shard)
