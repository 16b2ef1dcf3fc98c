"""The tasks of a precomputed write: gather a shard's chunks from the blocks, publish the file.

Each chunk is assembled once, straight into a Fortran-ordered buffer (x
varying fastest, as the ``raw`` encoding stores it: that buffer is then
the chunk's bytes, with no other copy), from the source blocks that
overlap it, then encoded (:mod:`shardpipe.formats.precomputed_chunks`).
Shard files are laid out through the shard-format protocol
(:mod:`shardpipe.formats.precomputed_shards`) with the helpers the zarr
writer uses: a whole shard is streamed to one atomic ``put``; a shard too
large for one task is written in parts (consecutive runs of its chunks in
slot order) and stamped by :func:`shardpipe.engine.publish_tasks.stamp_parts`.
"""

from __future__ import annotations

from collections.abc import Buffer, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from shardpipe.core.grid import Box, intersect
from shardpipe.core.precomputed_plan import ScaleGrid, ShardChunks
from shardpipe.engine.publish_tasks import WrittenPart, put_part, put_shard, stamp_parts
from shardpipe.engine.reports import WriteReport
from shardpipe.formats.precomputed import PrecomputedSharding
from shardpipe.formats.precomputed_chunks import encode_chunk
from shardpipe.formats.precomputed_shards import PrecomputedShards, shard_format_of
from shardpipe.storage.base import ShardStore
from shardpipe.storage.parts import PartsHandle


@dataclass(frozen=True)
class PrecomputedTarget:
    """Where and how one scale's shards are written (shipped to the workers).

    Parameters
    ----------
    store : ShardStore
        The storage backend.
    prefix : str
        Key prefix of the scale's shard files (``"<scale key>/"``, with the
        volume's path in front).
    scale : ScaleGrid
        The scale's chunk grid.
    sharding : PrecomputedSharding
        Its sharding spec.
    encoding : str
        The chunk encoding.
    """

    store: ShardStore
    prefix: str
    scale: ScaleGrid
    sharding: PrecomputedSharding
    encoding: str = "raw"

    def shard_format(self, shard: ShardChunks) -> PrecomputedShards:
        """The format of ``shard``'s file: the scale's boxes, or that one scattered shard."""
        return shard_format_of(self.scale, self.sharding, shard)

    def key(self, shard: int) -> str:
        """The key of shard file number ``shard``."""
        return self.prefix + self.sharding.shard_key(shard)


def assemble_chunk(
    box: Box, blocks: Sequence[np.ndarray], block_boxes: Sequence[Box]
) -> np.ndarray:
    """The chunk at voxel ``box``, Fortran-ordered, cut from the blocks overlapping it.

    ``blocks`` are ``(x, y, z, channel)`` arrays at ``block_boxes``; together
    they must cover ``box``.
    """
    first = blocks[0]
    shape = (*(b - a for a, b in box), first.shape[3])
    out = np.empty(shape, dtype=first.dtype.newbyteorder("<"), order="F")
    for block, where in zip(blocks, block_boxes, strict=True):
        common = intersect(box, where)
        if common is None:
            continue
        into = tuple(slice(a - o, b - o) for (a, b), (o, _) in zip(common, box, strict=True))
        take = tuple(slice(a - o, b - o) for (a, b), (o, _) in zip(common, where, strict=True))
        # a C-ordered copy of the piece first, then the transposing copy inside the cache:
        # 3.6x faster than one strided copy from the block (measured, uint8 64^3 chunks)
        out[into] = np.ascontiguousarray(block[take])
    return out


def chunk_bytes(
    target: PrecomputedTarget,
    coords: Sequence[int],
    blocks: Sequence[np.ndarray],
    block_boxes: Sequence[Box],
) -> Buffer:
    """The encoded bytes of the chunk at grid ``coords``, cut from the blocks overlapping it."""
    box = tuple((s.start, s.stop) for s in target.scale.chunk_box(coords))
    near = [i for i, where in enumerate(block_boxes) if intersect(box, where) is not None]
    chunk = assemble_chunk(box, [blocks[i] for i in near], [block_boxes[i] for i in near])
    return encode_chunk(chunk, target.encoding)


def _published(
    target: PrecomputedTarget, shard: ShardChunks, ids: np.ndarray, stored: Iterable[Buffer]
) -> WriteReport:
    """Stream the ``stored`` bytes of chunks ``ids`` (increasing) into ``shard``'s file."""
    shard_format = target.shard_format(shard)
    slots, _ = shard_format.slots((shard.shard,), ids)
    encoded = zip(slots.tolist(), stored, strict=True)
    return put_shard(
        target.store, target.key(shard.shard), shard_format, encoded, shard=(shard.shard,)
    )


def write_shard(
    target: PrecomputedTarget,
    *blocks: np.ndarray,
    shard: ShardChunks,
    block_boxes: tuple[Box, ...],
) -> WriteReport:
    """Gather every chunk of ``shard`` from ``blocks`` (at ``block_boxes``) and publish the file.

    Chunks are encoded one after the other as the file is written.
    """
    stored = (
        target.sharding.encode_data(chunk_bytes(target, c, blocks, block_boxes))
        for c in shard.coords
    )
    return _published(target, shard, shard.ids, stored)


# -- shards larger than a task's budget: parts, then a stamp --------------------------------
def begin_shard(target: PrecomputedTarget, *, shard: int, staging: str) -> PartsHandle:
    """Start writing shard file number ``shard`` in parts (in the order of their numbers)."""
    return target.store.begin_parts(target.key(shard), staging, any_order=False)


def _write_laid_out(
    target: PrecomputedTarget, handle: PartsHandle, number: int, stored: list[tuple[int, Buffer]]
) -> WrittenPart:
    """Write one part: ``stored`` ``(slot, bytes)`` back to back, padded to the store's minimum.

    The last part is padded too (the minishard indexes follow it, in the
    stamp's tail); a reader skips padding, since every chunk's offset is listed.
    """
    return put_part(target.store, handle, number, stored, min_size=target.store.min_part_size)


def write_part(
    target: PrecomputedTarget,
    handle: PartsHandle,
    *blocks: np.ndarray,
    number: int,
    slots: tuple[int, ...],
    coords: tuple[tuple[int, ...], ...],
    block_boxes: tuple[Box, ...],
) -> WrittenPart:
    """Gather, encode and write part ``number`` of a shard: the chunks at ``slots`` (increasing)."""
    stored = [
        (slot, target.sharding.encode_data(chunk_bytes(target, c, blocks, block_boxes)))
        for slot, c in zip(slots, coords, strict=True)
    ]
    return _write_laid_out(target, handle, number, stored)


def stamp_shard(
    target: PrecomputedTarget, handle: PartsHandle, *parts: WrittenPart, shard: ShardChunks
) -> WriteReport:
    """Write the shard index (head) and the minishard indexes (tail); publish the file."""
    return stamp_parts(
        target.store, target.shard_format(shard), handle, parts, shard=(shard.shard,)
    )


# -- scattered shards (murmurhash): chunks encoded where their blocks are ------------------
@dataclass(frozen=True)
class BlockChunks:
    """What one source block holds of a scale's scattered shards, by shard number.

    Parameters
    ----------
    encoded : dict
        Shard number to ``[(id, stored bytes)]`` of the chunks wholly inside
        the block, encoded (and gzip'd, with ``data_encoding="gzip"``) here.
    pieces : dict
        Shard number to ``[(id, voxel box, voxels)]`` of the chunks the block
        holds only part of (raw: they are encoded once whole).
    """

    encoded: dict[int, list[tuple[int, Buffer]]]
    pieces: dict[int, list[tuple[int, Box, np.ndarray]]]


def encode_block_chunks(
    target: PrecomputedTarget,
    block: np.ndarray,
    *,
    block_box: Box,
    chunks: tuple[tuple[int, int, tuple[int, ...]], ...],
) -> BlockChunks:
    """Encode the chunks wholly inside ``block``; cut the pieces of the others.

    ``chunks`` are ``(id, shard, grid coordinates)`` of every chunk the block overlaps.
    """
    encoded: dict[int, list[tuple[int, Buffer]]] = {}
    pieces: dict[int, list[tuple[int, Box, np.ndarray]]] = {}
    for chunk_id, shard, coords in chunks:
        box = tuple((s.start, s.stop) for s in target.scale.chunk_box(coords))
        common = intersect(box, block_box)
        if common is None:
            continue
        take = tuple(slice(a - o, b - o) for (a, b), (o, _) in zip(common, block_box, strict=True))
        if common == box:
            chunk = assemble_chunk(box, [block], [block_box])
            data = target.sharding.encode_data(encode_chunk(chunk, target.encoding))
            encoded.setdefault(shard, []).append((chunk_id, data))
        else:
            pieces.setdefault(shard, []).append((chunk_id, common, np.array(block[take])))
    return BlockChunks(encoded, pieces)


def for_shard(held: BlockChunks, shard: int, first: int, last: int) -> BlockChunks:
    """What of a block's chunks goes to shard number ``shard`` with ids in ``[first, last]``."""

    def within(chunk_id: int) -> bool:
        return first <= chunk_id <= last

    return BlockChunks(
        {shard: [c for c in held.encoded.get(shard, []) if within(c[0])]},
        {shard: [c for c in held.pieces.get(shard, []) if within(c[0])]},
    )


def _gathered(
    target: PrecomputedTarget, shard: ShardChunks, held: Sequence[BlockChunks]
) -> tuple[np.ndarray, list[Buffer]]:
    """Ids (increasing) and stored bytes of the chunks ``held`` sends to ``shard``.

    The chunks a block held whole arrive encoded; the others are put
    together from their pieces and encoded here.
    """
    number = shard.shard
    stored: dict[int, Buffer] = {}
    pieces: dict[int, list[tuple[Box, np.ndarray]]] = {}
    for h in held:
        stored.update(h.encoded.get(number, []))
        for chunk_id, box, voxels in h.pieces.get(number, []):
            pieces.setdefault(chunk_id, []).append((box, voxels))
    if pieces:
        coords = dict(zip(shard.ids.tolist(), shard.coords, strict=True))
        for chunk_id, parts in pieces.items():
            box = tuple((s.start, s.stop) for s in target.scale.chunk_box(coords[chunk_id]))
            chunk = assemble_chunk(box, [p for _, p in parts], [b for b, _ in parts])
            stored[chunk_id] = target.sharding.encode_data(encode_chunk(chunk, target.encoding))
    ids = sorted(stored)
    return np.array(ids, dtype=np.uint64), [stored[i] for i in ids]


def write_gathered_shard(
    target: PrecomputedTarget, *held: BlockChunks, shard: ShardChunks
) -> WriteReport:
    """Publish a scattered shard from its chunks' encoded bytes and pieces."""
    ids, stored = _gathered(target, shard, held)
    return _published(target, shard, ids, stored)


def write_gathered_part(
    target: PrecomputedTarget,
    handle: PartsHandle,
    *held: BlockChunks,
    number: int,
    chunks: ShardChunks,
    first_slot: int,
) -> WrittenPart:
    """Write part ``number`` of a scattered shard: the chunks ``held`` sends to it.

    ``chunks`` are the part's chunks, a run of the shard's members starting
    at slot ``first_slot``.
    """
    ids, stored = _gathered(target, chunks, held)
    slots = first_slot + np.searchsorted(chunks.ids, ids)
    return _write_laid_out(target, handle, number, list(zip(slots.tolist(), stored, strict=True)))
