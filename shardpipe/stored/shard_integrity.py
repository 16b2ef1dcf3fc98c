"""Checking one shard object: its index, its chunk ranges and every inner chunk.

For each shard object: the index has the right size and its CRC32C
matches; every stored inner chunk lies inside the object and outside the
index; no two chunks overlap; an entry is either fully empty or fully set;
and every stored chunk decodes to an inner chunk of the right shape.

A chunk that fails is reported by its coordinates in the array's grid of
inner chunks, its slot in the shard's index and the shard's key, with the
cause in words (:class:`ChunkFailure`): a CRC32C mismatch, a zstd frame whose
declared content size is not the chunk's (read from the frame header, never
allocated), or the codec's own error.

:class:`ShardChecker` checks a batch of listed shards (a picklable task) and
:func:`~shardpipe.engine.shard_sweep.checked_shards` runs it over every shard present in an array
(:mod:`shardpipe.stored.listing`); :mod:`shardpipe.maintenance.verification` adds them up.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from shardpipe.codec.chunk_codec import ChunkCodec, ChunkDecodeError, describe_error
from shardpipe.core.grid import Coords, ShardLayout
from shardpipe.errors import ShardFormatError
from shardpipe.formats.base import EMPTY, ShardFormat, ShardIndex, exact_total
from shardpipe.formats.zarr_sharding import ZarrShardingFormat
from shardpipe.storage.base import ShardStore
from shardpipe.stored.listing import Listed

WHOLE_READ_LIMIT = 256 << 20
"""Shards up to this size are read in one request; larger ones by ranges."""


@dataclass(frozen=True)
class ChunkFailure:
    """An inner chunk whose stored bytes are not a valid encoding of it.

    Attributes
    ----------
    key : str
        Store key of the shard holding it.
    chunk : tuple of int
        Its coordinates in the array's grid of inner chunks.
    slot : int
        Its slot in the shard's index (C order over the shard's chunks).
    cause : str
        What is wrong, in words.
    """

    key: str
    chunk: Coords
    slot: int
    cause: str

    def __str__(self) -> str:
        return f"inner chunk {self.chunk} (slot {self.slot}): {self.cause}"


@dataclass
class ShardCheck:
    """The outcome of checking one shard object (or one key that is no shard of the grid).

    ``chunk_failures`` lists the inner chunks that fail to decode; each is
    also one of ``problems``, as text. ``coords`` is the shard's position in
    the shard grid (None for a key that names no shard of it).
    """

    key: str
    present: bool = False
    nbytes: int = 0
    chunks_stored: int = 0
    unused_bytes: int = 0
    problems: list[str] = field(default_factory=list)
    chunk_failures: list[ChunkFailure] = field(default_factory=list)
    coords: Coords | None = None


def _check_entries(check: ShardCheck, index: ShardIndex, index_range: tuple[int, int]) -> None:
    offsets, lengths = index.entries[:, 0], index.entries[:, 1]
    half = (offsets == EMPTY) != (lengths == EMPTY)
    for slot in np.flatnonzero(half):
        check.problems.append(f"slot {slot}: only one of offset/nbytes is the empty marker")
    stored = np.flatnonzero(index.stored() & ~half)
    check.chunks_stored = len(stored)
    starts, stops = offsets[stored], offsets[stored] + lengths[stored]
    for slot, start, stop in zip(stored, starts, stops, strict=True):
        if stop > check.nbytes or stop < start:
            check.problems.append(
                f"slot {slot}: range [{start}, {stop}) lies outside the {check.nbytes}-byte shard"
            )
        elif start < index_range[1] and stop > index_range[0]:
            check.problems.append(f"slot {slot}: range [{start}, {stop}) overlaps the index")
    order = np.argsort(starts, kind="stable")
    for a, b in itertools.pairwise(order):
        if stops[a] > starts[b]:
            check.problems.append(f"slots {stored[a]} and {stored[b]} overlap")
    index_nbytes = index_range[1] - index_range[0]
    total = exact_total(lengths[stored])  # forged lengths wrap a uint64 sum around 2**64
    if total > check.nbytes - index_nbytes:
        check.problems.append(
            f"the stored chunks' lengths add up to {total:,} bytes, more than the "
            f"{check.nbytes - index_nbytes:,} bytes the {check.nbytes:,}-byte shard holds "
            "besides its index"
        )
    check.unused_bytes = max(0, check.nbytes - index_nbytes - total)


def check_shard(
    store: ShardStore,
    key: str,
    layout: ShardLayout,
    codec: ChunkCodec,
    shard_format: ShardFormat,
    *,
    decode: bool = True,
    coords: Coords | None = None,
) -> ShardCheck:
    """Check the shard object at ``key``: its index, and with ``decode`` every inner chunk.

    ``coords`` (the shard's position in the shard grid) lets a failing inner
    chunk be named by its coordinates in the array's grid of inner chunks;
    without it, by its coordinates inside the shard.
    """
    check = ShardCheck(key, coords=coords)
    got = store.get_within(key, WHOLE_READ_LIMIT)  # one request on an object store
    if got is None:
        return check
    size, whole = got
    check.present, check.nbytes = True, size

    def read(start: int, stop: int) -> bytes:
        return whole[start:stop] if whole is not None else store.get_range(key, start, stop)

    try:
        # a zarr index is the same in every shard: a shard checked alone needs no position
        index, index_range = shard_format.read_index(read, size, shard=coords or ())
    except ShardFormatError as err:
        check.problems.append(str(err))
        return check
    _check_entries(check, index, index_range)
    if check.problems or not decode:
        return check
    per_shard = layout.chunks_per_shard
    for slot in np.flatnonzero(index.stored()):
        start, nbytes = (int(v) for v in index.entries[slot])
        local = tuple(int(i) for i in np.unravel_index(slot, per_shard))
        chunk_coords = (
            local
            if coords is None
            else tuple(s * n + i for s, n, i in zip(coords, per_shard, local, strict=True))
        )
        try:
            chunk = codec.decode(read(start, start + nbytes))
        except ChunkDecodeError as err:
            _fail(check, ChunkFailure(key, chunk_coords, int(slot), str(err)))
            continue
        except Exception as err:  # any other failure is a finding too, not a crash
            _fail(
                check,
                ChunkFailure(
                    key, chunk_coords, int(slot), f"does not decode: {describe_error(err)}"
                ),
            )
            continue
        if chunk.shape != layout.chunk_shape:
            cause = f"decodes to shape {chunk.shape}, not {layout.chunk_shape}"
            _fail(check, ChunkFailure(key, chunk_coords, int(slot), cause))
    return check


def _fail(check: ShardCheck, failure: ChunkFailure) -> None:
    check.chunk_failures.append(failure)
    check.problems.append(str(failure))


def checksum_note(codec: ChunkCodec) -> str | None:
    """The report's note for an array whose inner chunks carry no checksum; None if they do."""
    if codec.checksummed:
        return None
    names = " -> ".join(str(c.to_dict()["name"]) for c in codec.codecs)
    return (
        f"inner chunks carry no checksum (inner codecs {names}): a bit flip inside a compressed "
        "chunk often decodes to wrong values without error, so not every one can be detected; "
        "write the array again with chunk_checksums=True (the default for new arrays) to "
        "detect them"
    )


@dataclass(frozen=True)
class ShardChecker:
    """Checks a batch of listed shards (a picklable task: it runs on cluster workers too).

    Parameters
    ----------
    store : ShardStore
        Where the shards are.
    layout : ShardLayout
        The array's grids.
    codec : ChunkCodec
        Its inner chunk codecs.
    shard_format : ZarrShardingFormat
        Its shard format.
    decode : bool
        Decode every inner chunk too (else only the index is checked).
    """

    store: ShardStore
    layout: ShardLayout
    codec: ChunkCodec
    shard_format: ZarrShardingFormat
    decode: bool = True

    def __call__(self, batch: list[Listed]) -> list[ShardCheck]:
        """The check of each shard of ``batch``, in order."""
        return [
            check_shard(
                self.store,
                item.key,
                self.layout,
                self.codec,
                self.shard_format,
                decode=self.decode,
                coords=item.coords,
            )
            for item in batch
        ]
