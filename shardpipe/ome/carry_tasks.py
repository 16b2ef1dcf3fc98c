"""The task of a conversion that keeps the chunks' bytes: gather v2 chunks into one v3 shard.

Each target shard is built by one task from the Zarr v2 chunks it covers,
read as stored (compressed; a chunk file larger than its codec can make is
refused by key, read no further than that) and laid into the shard as its
inner chunks: nothing is decoded (a zlib chunk is only re-wrapped as a gzip
member), and a CRC32C of the bytes is appended when the target's chain ends
with ``crc32c``. The shard is published in one put (atomic on every backend).
Chunks that are absent in the source (the fill value) stay absent.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import crc32c

from shardpipe.codec.plain_chain import CRC32C_NBYTES
from shardpipe.codec.zlib_rewrap import zlib_to_gzip
from shardpipe.core.grid import Coords, Shape
from shardpipe.engine.reports import WriteReport
from shardpipe.formats.base import assemble_shard
from shardpipe.formats.zarr_sharding import ZarrShardingFormat
from shardpipe.ome.source_reads import read_at_most
from shardpipe.storage.base import ShardStore
from shardpipe.storage.each import call_each

__all__ = ["CarryTarget", "carry_shard"]

_WHAT = "a chunk of this level can take through its codecs"

READS_AT_ONCE = 16
"""Chunks a carrying task reads at once (on S3 one request each, elsewhere two: size, bytes)."""


@dataclass(frozen=True)
class CarryTarget:
    """What a carrying task needs to know about one level array.

    Parameters
    ----------
    source : ShardStore
        The v2 array's store.
    source_prefix : str
        Key prefix of its chunks (``"path/"``).
    separator : str
        The v2 ``dimension_separator`` (``"."`` or ``"/"``).
    chunk_grid : tuple of int
        Chunks along each dimension of the v2 array.
    target : ShardStore
        Where shards go.
    target_prefix : str
        Key prefix of the v3 array (``"path/"``).
    shard_format : ZarrShardingFormat
        The v3 array's shard layout.
    rewrap_zlib : bool
        Re-wrap each chunk (a zlib stream) as a gzip member.
    checksum : bool
        Append each chunk's CRC32C (the chain ends with ``crc32c``).
    limit : int
        Most bytes any step of the v3 chain holds for one chunk: a v2 chunk
        file is read only if it holds at most that (less the CRC32C's 4 bytes
        with ``checksum``: the bytes before that step), and a zlib stream
        re-wrapped inflates to at most that.
    """

    source: ShardStore
    source_prefix: str
    separator: str
    chunk_grid: Shape
    target: ShardStore
    target_prefix: str
    shard_format: ZarrShardingFormat
    rewrap_zlib: bool
    checksum: bool
    limit: int


def carry_shard(target: CarryTarget, shard: Coords) -> WriteReport:
    """Build shard ``shard`` of the v3 array from the v2 chunks it covers; publish it.

    The chunks are read :data:`READS_AT_ONCE` at a time where the source's
    reads wait out round trips (an object store:
    :attr:`~shardpipe.storage.base.StoreAbilities.reads_at_once`), else one
    after another; the shard holds them all anyway. Each chunk read is let go
    as it is laid into the shard (its checksummed copy takes its place), so
    that the task holds the shard's chunks once.
    """
    per_shard = target.shard_format.chunks_per_shard
    bound = target.limit - CRC32C_NBYTES if target.checksum else target.limit
    slots: list[Coords] = []
    keys: list[str] = []
    for local in itertools.product(*(range(n) for n in per_shard)):
        chunk = tuple(s * n + i for s, n, i in zip(shard, per_shard, local, strict=True))
        if any(c >= g for c, g in zip(chunk, target.chunk_grid, strict=True)):
            continue
        name = target.separator.join(str(c) for c in chunk) if chunk else "0"
        slots.append(local)
        keys.append(f"{target.source_prefix}{name}")
    stored: list[bytes | None] = [None] * len(keys)

    def read(index: int) -> None:
        stored[index] = read_at_most(target.source, keys[index], bound, _WHAT)

    call_each(read, range(len(keys)), READS_AT_ONCE if target.source.abilities.reads_at_once else 1)
    encoded = []
    for index, local in enumerate(slots):
        data, stored[index] = stored[index], None  # held once: as read, or as laid in
        if data is None:
            continue
        if target.rewrap_zlib:
            data = zlib_to_gzip(data, target.limit)
        if target.checksum:
            data = data + crc32c.crc32c(data).to_bytes(4, "little")
        encoded.append((target.shard_format.slot(local), data))
    if not encoded:
        return WriteReport(shards=1, shards_empty=1)
    buffers = assemble_shard(target.shard_format, encoded, shard=shard)
    key = f"{target.target_prefix}{target.shard_format.key(shard)}"
    target.target.put(key, buffers)
    return WriteReport(
        shards=1, nbytes=sum(len(memoryview(b)) for b in buffers), chunks_stored=len(encoded)
    )
