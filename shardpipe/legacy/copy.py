"""Copying one shard of a draft array to its Zarr v3 key (for :mod:`shardpipe.legacy.migration`).

The cheapest way the stores allow, each copy atomic: a hard link when the
bytes are unchanged and both keys lie on one local disk; a server-side
multipart copy (S3 ``UploadPartCopy``) inside one store; else the shard
passes through this process in parts of at most :data:`STREAM_PIECE`
bytes (a multipart upload), or whole when the store takes no parts. With
``add_crc32c`` the CRC32C of the shard's index is appended. A zlib array
translated with ``zlib_as_gzip`` has its shards rebuilt instead, each chunk
re-wrapped as a gzip member (:mod:`shardpipe.codec.zlib_rewrap`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import crc32c
import numpy as np

from shardpipe.codec.chunk_codec import ChunkCodec
from shardpipe.codec.zlib_rewrap import zlib_to_gzip
from shardpipe.core.grid import Coords
from shardpipe.errors import ShardFormatError
from shardpipe.formats.base import assemble_shard, read_checked_index
from shardpipe.formats.zarr_sharding import CHECKSUM_NBYTES, ZarrShardingFormat
from shardpipe.legacy.metadata import LegacyArray
from shardpipe.storage.base import ShardStore
from shardpipe.storage.parts import PartsHandle
from shardpipe.storage.resolve import ResolvedStore

COPY_PIECE = 4 << 30
"""Most bytes of one server-side copied part (S3 allows 5 GiB)."""
STREAM_PIECE = 8 << 20
"""Most bytes of one part when a shard is copied through this process (S3's least is 5 MiB)."""


@dataclass(frozen=True)
class DraftShard:
    """One draft shard to copy (its index read and checked)."""

    array: LegacyArray
    key: str
    coords: Coords
    size: int

    @property
    def v3_key(self) -> str:
        """Its key in the v3 hierarchy, relative to the root (``a/x/c/0/1``)."""
        key = self.array.v3_key(self.coords)
        return f"{self.array.path}/{key}" if self.array.path else key


def copy_shard(
    src: ResolvedStore, dst: ResolvedStore, shard: DraftShard, add_crc32c: bool, staging: str
) -> None:
    """Copy one shard byte for byte to its v3 key (plus its index's CRC32C).

    Parameters
    ----------
    src, dst : ResolvedStore
        The draft hierarchy's root and the v3 hierarchy's (the same in place).
    shard : DraftShard
        The shard.
    add_crc32c : bool
        Append the CRC32C of its index.
    staging : str
        Where multipart copies keep their records, relative to ``dst``.
    """
    array = shard.array
    key = dst.key(shard.v3_key)
    if array.zlib_to_gzip:
        _rewrap(src, dst, shard, key, add_crc32c)
        return
    tail = b""
    if add_crc32c:
        index = src.shards.get_range(shard.key, shard.size - 16 * array.n_slots, shard.size)
        tail = crc32c.crc32c(index).to_bytes(CHECKSUM_NBYTES, "little")
    store = dst.shards
    if src.shards is store and store.abilities.hard_links and not tail:  # no byte copied
        store.link(shard.key, key)
    elif src.shards is store and store.abilities.copy_range and shard.size >= store.min_part_size:
        _in_parts(  # server side: not through this process
            store,
            key,
            dst.key(staging),
            _bounds(shard.size, COPY_PIECE, store.min_part_size, store.max_parts),
            lambda handle, n, a, b: store.copy_part(handle, n, shard.key, a, b),
            tail,
        )
    elif store.supports_parts and shard.size > STREAM_PIECE:  # one piece in memory at a time
        _in_parts(
            store,
            key,
            dst.key(staging),
            _bounds(shard.size, STREAM_PIECE, store.min_part_size, store.max_parts),
            lambda handle, n, a, b: store.write_part(
                handle, n, [src.shards.get_range(shard.key, a, b)]
            ),
            tail,
        )
    else:
        data = src.shards.get(shard.key)
        if data is None:
            raise FileNotFoundError(shard.key)
        store.put(key, [data, tail])


def _in_parts(
    store: ShardStore,
    key: str,
    staging: str,
    bounds: list[int],
    part: Callable[[PartsHandle, int, int, int], Any],
    tail: bytes,
) -> None:
    """Publish ``key`` from the parts ``part(handle, n, start, stop)`` writes, then ``tail``."""
    handle = store.begin_parts(key, staging)
    try:
        receipts = [part(handle, n, a, b) for n, (a, b) in enumerate(itertools.pairwise(bounds))]
        store.finish_parts(handle, receipts, b"", tail)
    except BaseException:
        store.abort_parts(handle)
        raise


def _bounds(size: int, most: int, least: int, max_parts: int | None = None) -> list[int]:
    """Edges of equal pieces of ``size`` bytes: at most ``most`` bytes, at least ``least``.

    ``least`` (the store's smallest part) wins, and so does ``max_parts``
    (pieces grow past ``most`` rather than outnumber it): a shard too small
    to be cut is one piece.
    """
    n = max(1, min(-(-size // most), size // max(least, 1), max_parts or size))
    return [size * k // n for k in range(n + 1)]


def _rewrap(src: ResolvedStore, dst: ResolvedStore, shard: DraftShard, key: str, crc: bool) -> None:
    """Rebuild a zlib shard with its chunks re-wrapped as gzip members, in stored order."""
    data = src.shards.get(shard.key)
    if data is None:
        raise FileNotFoundError(shard.key)
    legacy = shard.array.shard_format
    index, _ = read_checked_index(
        legacy, lambda a, b: data[a:b], len(data), shard.key, shard=shard.coords
    )
    slots = np.flatnonzero(index.stored())
    slots = slots[np.argsort(index.entries[slots, 0], kind="stable")]
    limit = ChunkCodec.from_metadata(shard.array.metadata).step_limit  # bounds every inflate
    encoded = []
    for slot in slots.tolist():
        start, nbytes = (int(v) for v in index.entries[slot])
        try:
            encoded.append((slot, zlib_to_gzip(data[start : start + nbytes], limit)))
        except ShardFormatError as err:
            raise ShardFormatError(
                f"shard {shard.key!r}, slot {slot}: {err}; run migrate again without "
                "zlib_as_gzip to copy the shards unchanged (numcodecs.zlib)"
            ) from err
    v3 = ZarrShardingFormat(legacy.chunks_per_shard, "end", checksum=crc)
    dst.shards.put(key, assemble_shard(v3, encoded, shard=shard.coords))
