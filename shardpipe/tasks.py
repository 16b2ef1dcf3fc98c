"""The functions Dask runs: encode pieces, write shards and parts, stamp indexes.

Each function is plain Python on NumPy arrays and bytes; the graph builder
(:mod:`shardpipe.graph`) decides which runs where. Nothing here takes a lock:
every shard key has exactly one task that publishes it.
"""

from __future__ import annotations

import math
from collections.abc import Buffer, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shardpipe.core.grid import Box, Coords, ShardLayout, box_to_slices
from shardpipe.core.plan import PartPlan, cut_block
from shardpipe.core.shard_format import (
    IndexLocation,
    PartManifest,
    assemble_shard,
    index_nbytes,
    lay_out_part,
    stamp_index,
)
from shardpipe.encoding import ChunkCodec
from shardpipe.storage.base import PartReceipt, PartsHandle, ShardStore


@dataclass(frozen=True)
class WriteTarget:
    """Everything a task needs to know about the array being written.

    Parameters
    ----------
    store : ShardStore
        Where shards go.
    layout : ShardLayout
        Shard and inner-chunk grids.
    codec : ChunkCodec
        Inner-chunk codec chain and fill value.
    index_location : {"start", "end"}
        Where each shard's index goes.
    staging : str
        Key prefix for scratch data of this write.
    """

    store: ShardStore
    layout: ShardLayout
    codec: ChunkCodec
    index_location: IndexLocation
    staging: str


@dataclass
class Piece:
    """What one block sends to the task assembling a part.

    Parameters
    ----------
    encoded : dict of int to bytes or None
        Inner chunks held whole by the block, already encoded, by index slot
        (``None``: equal to the fill value, not stored).
    raw : list of (Box, ndarray)
        Bits of chunks that straddle the block's edge, with their boxes in
        array coordinates.
    """

    encoded: dict[int, Buffer | None] = field(default_factory=dict)
    raw: list[tuple[Box, np.ndarray]] = field(default_factory=list)


@dataclass(frozen=True)
class WriteReport:
    """What a publishing task reports: one shard (or part) and its bytes."""

    shards: int
    nbytes: int
    chunks_stored: int


def _encode_from(
    target: WriteTarget, shard: Coords, locals_: Iterator[Coords], data: np.ndarray, origin: Coords
) -> Iterator[tuple[int, Buffer | None]]:
    """Encode inner chunks of ``shard`` cut from ``data`` (whose first element is at ``origin``)."""
    layout = target.layout
    for local in locals_:
        box = layout.clip(layout.chunk_box(shard, local))
        assert box is not None
        yield layout.chunk_slot(local), target.codec.encode(data[box_to_slices(box, origin)])


def encode_piece(
    target: WriteTarget, block: np.ndarray, *, block_box: Box, shard: Coords, part: PartPlan
) -> Piece:
    """Encode what ``block`` holds of ``part``: whole chunks encoded, the rest raw.

    Runs where the block lives, so that only encoded bytes (and the bits of
    chunks straddling block edges) travel to the part's task.
    """
    cut = cut_block(target.layout, shard, part, block_box)
    origin = tuple(start for start, _ in block_box)
    piece = Piece(dict(_encode_from(target, shard, iter(cut.whole), block, origin)))
    # views: a local scheduler passes them on as they are, and pickling them
    # for another worker sends only the viewed elements
    piece.raw.extend((box, block[box_to_slices(box, origin)]) for box in cut.raw_boxes)
    return piece


def _gather(
    target: WriteTarget, shard: Coords, part: PartPlan, pieces: tuple[Piece, ...]
) -> list[tuple[int, Buffer]]:
    """Assemble the chunks of ``part`` from pieces and encode those not yet encoded."""
    layout = target.layout
    encoded: dict[int, Buffer | None] = {}
    for piece in pieces:
        encoded.update(piece.encoded)
    if any(piece.raw for piece in pieces):
        full = part.chunks.element_box(layout, shard)
        origin = tuple(start for start, _ in full)
        shape = tuple(stop - start for start, stop in full)
        canvas = np.empty(shape, dtype=target.codec.dtype)
        covered = sum(values.size for piece in pieces for _, values in piece.raw)
        if covered + len(encoded) * math.prod(layout.chunk_shape) < canvas.size:
            canvas.fill(target.codec.fill_value)  # some elements come from no piece
        for piece in pieces:
            for box, values in piece.raw:
                canvas[box_to_slices(box, origin)] = values
        todo = (local for local in part.chunks.chunks() if layout.chunk_slot(local) not in encoded)
        encoded.update(_encode_from(target, shard, todo, canvas, origin))
    return _in_order(layout, part, encoded)


def _in_order(
    layout: ShardLayout, part: PartPlan, encoded: dict[int, Buffer | None]
) -> list[tuple[int, Buffer]]:
    """The stored chunks of ``part`` in C order of their slots."""
    out = []
    for local in part.chunks.chunks():
        data = encoded.get(layout.chunk_slot(local))
        if data is not None:
            out.append((layout.chunk_slot(local), data))
    return out


def _encode_part(
    target: WriteTarget,
    shard: Coords,
    part: PartPlan,
    sources: tuple[Any, ...],
    block_boxes: tuple[Box, ...] | None,
) -> list[tuple[int, Buffer]]:
    """Encode the stored chunks of ``part`` from its sources, in slot order.

    ``sources`` are the Dask blocks feeding the part (with ``block_boxes``)
    or the pieces they already made (``block_boxes`` None).
    """
    if block_boxes is None:
        return _gather(target, shard, part, sources)
    if part.is_direct:
        origin = tuple(start for start, _ in block_boxes[0])
        chunks = _encode_from(target, shard, part.chunks.chunks(), sources[0], origin)
        return _in_order(target.layout, part, dict(chunks))
    pieces = tuple(
        encode_piece(target, block, block_box=box, shard=shard, part=part)
        for block, box in zip(sources, block_boxes, strict=True)
    )
    return _gather(target, shard, part, pieces)


def write_shard(
    target: WriteTarget,
    *sources: Any,
    shard: Coords,
    key: str,
    part: PartPlan,
    block_boxes: tuple[Box, ...] | None,
) -> WriteReport:
    """Encode a whole shard (a single part) and publish it in one atomic write.

    ``sources`` are the blocks holding the shard (with ``block_boxes``) or
    the pieces they made. A shard whose every chunk equals the fill value is
    not written.
    """
    encoded = _encode_part(target, shard, part, sources, block_boxes)
    if not encoded:
        return WriteReport(shards=1, nbytes=0, chunks_stored=0)
    buffers = assemble_shard(encoded, target.layout.n_chunks_per_shard, target.index_location)
    target.store.put(key, buffers)
    nbytes = sum(memoryview(b).nbytes for b in buffers)
    return WriteReport(shards=1, nbytes=nbytes, chunks_stored=len(encoded))


def begin_shard(target: WriteTarget, *, key: str) -> PartsHandle:
    """Start writing the shard at ``key`` in parts."""
    return target.store.begin_parts(key, target.staging)


def write_part(
    target: WriteTarget,
    handle: PartsHandle,
    *sources: Any,
    shard: Coords,
    part: PartPlan,
    block_boxes: tuple[Box, ...] | None,
) -> tuple[PartManifest, PartReceipt | None]:
    """Encode one part of a shard and write it; report where its chunks lie.

    A part with no stored chunk writes nothing. A part smaller than the
    store's minimum part size is padded with unused bytes.
    """
    encoded = _encode_part(target, shard, part, sources, block_boxes)
    buffers, manifest = lay_out_part(encoded, min_size=target.store.min_part_size)
    if manifest.size == 0:
        return manifest, None
    return manifest, target.store.write_part(handle, part.number, buffers)


def stamp_shard(
    target: WriteTarget, handle: PartsHandle, *reports: tuple[PartManifest, PartReceipt | None]
) -> WriteReport:
    """Write the index of a shard made of parts and publish the shard atomically."""
    receipts = [r for _, r in reports if r is not None]
    manifests = [m for m, _ in reports]
    if not receipts:
        target.store.abort_parts(handle)
        return WriteReport(shards=1, nbytes=0, chunks_stored=0)
    n_slots = target.layout.n_chunks_per_shard
    at_start = target.index_location == "start"
    # the index goes first or last; first, the store may want it padded (S3: 5 MiB)
    head_nbytes = target.store.head_size(index_nbytes(n_slots)) if at_start else 0
    index = stamp_index(n_slots, manifests, first_offset=head_nbytes).encode()
    head, tail = (index.ljust(head_nbytes, b"\0"), b"") if at_start else (b"", index)
    target.store.finish_parts(handle, receipts, head, tail)
    nbytes = len(head) + sum(m.size for m in manifests) + len(tail)
    return WriteReport(shards=1, nbytes=nbytes, chunks_stored=sum(len(m.slots) for m in manifests))


def finish_write(target: WriteTarget, *reports: WriteReport) -> WriteReport:
    """Remove the write's staging area and add up the reports of all publishing tasks."""
    target.store.discard_staging(target.staging)
    return WriteReport(
        shards=sum(r.shards for r in reports),
        nbytes=sum(r.nbytes for r in reports),
        chunks_stored=sum(r.chunks_stored for r in reports),
    )
