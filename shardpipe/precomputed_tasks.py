"""The task of a precomputed write: gather a shard's chunks from the blocks, publish the file.

Each chunk is assembled once, straight into a Fortran-ordered buffer (x
varying fastest, as the ``raw`` encoding stores it: that buffer is then
the chunk's bytes, with no other copy), from the source blocks that
overlap it, then encoded (:mod:`shardpipe.formats.precomputed_chunks`).
One task writes each shard file in one atomic ``put`` of the storage
backend; it holds the shard's chunks (and the blocks it was given) while
it runs.
"""

from __future__ import annotations

from collections.abc import Buffer, Sequence
from dataclasses import dataclass

import numpy as np

from shardpipe.core.grid import Box, intersect
from shardpipe.core.precomputed_plan import ScaleGrid, ShardChunks
from shardpipe.formats.precomputed import PrecomputedSharding
from shardpipe.formats.precomputed_chunks import encode_chunk
from shardpipe.reports import WriteReport
from shardpipe.storage.base import PartReceipt, PartsHandle, ShardStore


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


def write_shard(
    target: PrecomputedTarget,
    *blocks: np.ndarray,
    shard: ShardChunks,
    block_boxes: tuple[Box, ...],
) -> WriteReport:
    """Gather every chunk of ``shard`` from ``blocks`` (at ``block_boxes``) and publish the file."""
    chunks = [
        (int(chunk_id), chunk_bytes(target, coords, blocks, block_boxes))
        for chunk_id, coords in zip(shard.ids.tolist(), shard.coords, strict=True)
    ]
    buffers = target.sharding.encode_shard(chunks)
    key = target.prefix + target.sharding.shard_key(shard.shard)
    target.store.put(key, buffers)
    return WriteReport(
        shards=1,
        nbytes=sum(memoryview(b).nbytes for b in buffers),
        chunks_stored=len(chunks),
    )


# -- shards larger than a task's budget: parts, then a stamp --------------------------------
@dataclass(frozen=True)
class WrittenChunks:
    """What a part task hands the stamp task: its receipt and where its chunks lie.

    Parameters
    ----------
    receipt : PartReceipt or None
        The part as the store took it (None: no chunk).
    ids : tuple of int
        The part's chunk ids, increasing, in the order their bytes lie.
    sizes : tuple of int
        Their encoded sizes.
    size : int
        Bytes of the part, padding to the store's minimum part size included.
    """

    receipt: PartReceipt | None
    ids: tuple[int, ...]
    sizes: tuple[int, ...]
    size: int


def begin_shard(target: PrecomputedTarget, *, shard: int, staging: str) -> PartsHandle:
    """Start writing shard file number ``shard`` in parts."""
    key = target.prefix + target.sharding.shard_key(shard)
    return target.store.begin_parts(key, staging)


def write_part(
    target: PrecomputedTarget,
    handle: PartsHandle,
    *blocks: np.ndarray,
    number: int,
    ids: tuple[int, ...],
    coords: tuple[tuple[int, ...], ...],
    block_boxes: tuple[Box, ...],
) -> WrittenChunks:
    """Gather, encode and write one part of a shard: chunks ``ids`` (increasing), back to back.

    A part shorter than the store's minimum part size is padded with zeros,
    the last one too (the minishard indexes follow it, in the stamp's tail);
    a reader skips padding, since every chunk's offset is listed.
    """
    encoded = [
        target.sharding.encode_data(chunk_bytes(target, c, blocks, block_boxes)) for c in coords
    ]
    sizes = tuple(memoryview(b).nbytes for b in encoded)
    total = sum(sizes)
    padding = max(target.store.min_part_size - total, 0) if total else 0
    buffers = [*encoded, bytes(padding)] if padding else encoded
    receipt = target.store.write_part(handle, number, buffers) if total else None
    return WrittenChunks(receipt, ids, sizes, total + padding)


def stamp_shard(
    target: PrecomputedTarget, handle: PartsHandle, *parts: WrittenChunks
) -> WriteReport:
    """Write the shard index (head) and the minishard indexes (tail) and publish the shard."""
    sharding = target.sharding
    written = [p for p in parts if p.receipt is not None]
    if not written:
        target.store.abort_parts(handle)
        return WriteReport(shards=1, shards_empty=1)
    # an object store's parts (the head among them) have a minimum size: zeros after the
    # shard index fill it, and every offset, counted from the index's end, skips them
    padding = max(target.store.min_part_size - sharding.index_nbytes, 0)
    located: list[tuple[int, int, int]] = []  # id, start (after the shard index), size
    position = padding
    for part in written:
        start = position
        for chunk_id, size in zip(part.ids, part.sizes, strict=True):
            located.append((chunk_id, start, size))
            start += size
        position += part.size
    index, tail = sharding.encode_indexes(located, position)
    head = index + bytes(padding)
    receipts = [p.receipt for p in written if p.receipt is not None]
    target.store.finish_parts(handle, receipts, head, tail)
    return WriteReport(
        shards=1,
        nbytes=len(index) + position + len(tail),
        chunks_stored=len(located),
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


def for_shard(held: BlockChunks, shard: int) -> BlockChunks:
    """The part of a block's chunks that goes to shard number ``shard``."""
    return BlockChunks({shard: held.encoded.get(shard, [])}, {shard: held.pieces.get(shard, [])})


def write_gathered_shard(
    target: PrecomputedTarget, *held: BlockChunks, shard: ShardChunks
) -> WriteReport:
    """Publish a scattered shard from its chunks' encoded bytes and pieces."""
    number = shard.shard
    stored: list[tuple[int, Buffer]] = []
    parts: dict[int, list[tuple[Box, np.ndarray]]] = {}
    for h in held:
        stored.extend(h.encoded.get(number, []))
        for chunk_id, box, voxels in h.pieces.get(number, []):
            parts.setdefault(chunk_id, []).append((box, voxels))
    coords = dict(zip(shard.ids.tolist(), shard.coords, strict=True))
    for chunk_id, pieces in parts.items():
        box = tuple((s.start, s.stop) for s in target.scale.chunk_box(coords[chunk_id]))
        chunk = assemble_chunk(box, [p for _, p in pieces], [b for b, _ in pieces])
        stored.append((chunk_id, target.sharding.encode_data(encode_chunk(chunk, target.encoding))))
    buffers = target.sharding.encode_shard(stored, stored=True)
    target.store.put(target.prefix + target.sharding.shard_key(number), buffers)
    return WriteReport(
        shards=1, nbytes=sum(memoryview(b).nbytes for b in buffers), chunks_stored=len(stored)
    )
