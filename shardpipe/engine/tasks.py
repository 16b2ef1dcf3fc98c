"""The functions Dask runs before publishing: encode pieces, cut and encode parts.

Each function is plain Python on NumPy arrays and bytes; the graph builder
(:mod:`shardpipe.engine.graph`) decides which runs where. Nothing here takes a lock:
every shard key has exactly one task that publishes it.
"""

from __future__ import annotations

import math
from collections.abc import Buffer, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, overload

import numpy as np

from shardpipe.codec.canvas import ChunkCanvas
from shardpipe.codec.chunk_codec import ChunkCodec, EncodedChunk
from shardpipe.core.cut import cut_block, whole_chunk_blocks
from shardpipe.core.grid import Box, Coords, ShardLayout, box_size, box_to_slices, intersect
from shardpipe.core.plan import PartPlan
from shardpipe.engine.encoders import encode_in_order, encoding_task
from shardpipe.engine.reports import WriteReport
from shardpipe.formats.base import (
    ShardFormat,
)
from shardpipe.storage.base import ShardStore
from shardpipe.storage.uploads import UploadRun


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
    shard_format : ShardFormat
        How shards are laid out (slot order, index, head and tail).
    staging : str
        Key prefix for scratch data of this write.
    encoders : int
        Most inner chunks one task may encode at once, on idle cores
        (:mod:`shardpipe.engine.encoders`): what ``max_mem`` allows.
    uploads : UploadRun or None
        The run whose uploads shard tasks hand on to their process's
        uploads (:mod:`shardpipe.storage.uploads`), on a store whose puts
        are worth it; None: each task puts its shard itself.
    """

    store: ShardStore
    layout: ShardLayout
    codec: ChunkCodec
    shard_format: ShardFormat
    staging: str
    encoders: int = 1
    uploads: UploadRun | None = None


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


EMPTY_SHARD = WriteReport(shards=1, shards_empty=1)


def _encode_from(
    target: WriteTarget, shard: Coords, locals_: Iterator[Coords], data: np.ndarray, origin: Coords
) -> Iterator[tuple[int, Buffer | None]]:
    """Encode inner chunks of ``shard`` cut from ``data`` (whose first element is at ``origin``)."""
    layout = target.layout
    for local in locals_:
        box = layout.clip(layout.chunk_box(shard, local))
        assert box is not None
        slot = target.shard_format.slot(local)
        yield slot, target.codec.encode(data[box_to_slices(box, origin)])


def encode_piece(
    target: WriteTarget,
    block: np.ndarray,
    *,
    block_box: Box,
    shard: Coords,
    part: PartPlan,
) -> Piece:
    """Encode what ``block`` holds of ``part``: whole chunks encoded, the rest raw.

    Runs where the block lives, so that only encoded bytes (and the bits of
    chunks straddling block edges) travel to the part's task. The raw bits
    are copies (a view would keep the whole block alive in the part's task).
    On a scheduler in this process the part's own task cuts its blocks
    instead (:func:`encode_part`).
    """
    cut = cut_block(target.layout, shard, part, block_box)
    origin = tuple(start for start, _ in block_box)
    with encoding_task():
        piece = Piece(dict(_encode_from(target, shard, iter(cut.whole), block, origin)))
    whole_block = box_size(block_box)
    for box in cut.raw_boxes:
        bits = block[box_to_slices(box, origin)]
        # a view of a bit of the block would keep the whole block alive in
        # the part's task; the memory model counts only the bits
        keep = box_size(box) == whole_block
        piece.raw.append((box, bits if keep else bits.copy()))
    return piece


class OldChunks(Protocol):
    """The old content of the partly covered inner chunks of a shard being updated."""

    partial: frozenset[Coords]
    """Local coordinates of the partly covered inner chunks."""

    def chunk(self, local: Coords) -> np.ndarray | None:
        """Decoded old chunk at ``local`` (inner chunk shape), or None when not stored."""
        ...


def _gather(
    target: WriteTarget,
    shard: Coords,
    part: PartPlan,
    pieces: tuple[Piece, ...],
    old: OldChunks | None = None,
) -> Iterator[tuple[int, Buffer | None]]:
    """Assemble the chunks of ``part`` from pieces and encode those not yet encoded.

    With ``old``, partly covered chunks start from their old content.
    """
    encoded: dict[int, Buffer | None] = {}
    for piece in pieces:
        encoded.update(piece.encoded)
    raw = [bits for piece in pieces for bits in piece.raw]
    if not raw:
        return iter(_in_order(target.shard_format, part, encoded))
    return _assemble(target, shard, part, raw, encoded, old)


def _assemble(
    target: WriteTarget,
    shard: Coords,
    part: PartPlan,
    raw: list[tuple[Box, np.ndarray]],
    encoded: dict[int, Buffer | None],
    old: OldChunks | None,
) -> Iterator[tuple[int, Buffer | None]]:
    """Paste ``raw`` (boxes and values) on a canvas of ``part``; encode what ``encoded`` lacks.

    The canvas is chunk-major (:class:`~shardpipe.codec.canvas.ChunkCanvas`): one
    copy of each raw element, and each chunk encoded from where it lies.
    Chunks are encoded lazily, in C order, as they are asked for
    (:func:`_encode_canvas`).
    """
    layout = target.layout
    origin = tuple(start for start, _ in part.chunks.element_box(layout, shard))
    canvas = ChunkCanvas(target.codec, part.chunks, origin)
    covered = sum(box_size(box) for box, _ in raw) + len(encoded) * math.prod(layout.chunk_shape)
    if old is not None or covered < canvas.n_elements:
        canvas.fill()  # some elements come from no piece (or from old chunks)
    if old is not None:
        _paste_old(target, shard, part, old, canvas)
    for box, values in raw:
        canvas.paste(box, values)
    return _encode_canvas(target, canvas, encoded)


def _encode_canvas(
    target: WriteTarget, canvas: ChunkCanvas, encoded: dict[int, Buffer | None]
) -> Iterator[tuple[int, Buffer | None]]:
    """Each chunk of ``canvas`` by index slot, in C order: from ``encoded``, else encoded now.

    On the task's thread, one chunk at a time, and each compressed chunk
    whole (its CRC32C appended, a copy), not as two buffers: measured on
    slab writes from computed blocks, keeping the compressor's outputs
    raised the peak RSS by 6-9 MiB and encoding on idle cores
    (:func:`~shardpipe.engine.encoders.encode_in_order`) by 2-4 MiB (glibc's
    heaps around the canvases of successive shards), for no CPU time
    measurably saved.
    """
    slot_of = target.shard_format.slot
    for local, chunk_slot in canvas.slots():
        slot = slot_of(local)
        yield slot, encoded[slot] if slot in encoded else target.codec.encode_slot(chunk_slot)


def _paste_old(
    target: WriteTarget, shard: Coords, part: PartPlan, old: OldChunks, canvas: ChunkCanvas
) -> None:
    """Copy the old content of the part's partly covered chunks onto ``canvas``."""
    layout = target.layout
    for local in old.partial:
        box = layout.clip(layout.chunk_box(shard, local))
        if box is None or not part.chunks.contains(local):
            continue
        before = old.chunk(local)
        if before is not None:
            canvas.paste_chunk(local, before[tuple(slice(0, b - a) for a, b in box)])


def _cut_in_task(
    target: WriteTarget,
    shard: Coords,
    part: PartPlan,
    blocks: tuple[Any, ...],
    block_boxes: tuple[Box, ...],
    old: OldChunks | None,
    *,
    scattered: bool = False,
) -> Iterator[tuple[int, EncodedChunk | None]]:
    """Encode ``part`` from the blocks feeding it, held by its own task.

    Where every chunk lies whole in a block, each is encoded from its block
    (no canvas); otherwise the blocks' share of the part is pasted on a
    canvas, the chunks they hold whole too (one copy either way).
    """
    layout = target.layout
    holders = (
        None
        if _on_canvas(target, old)
        else whole_chunk_blocks(layout, shard, part.chunks, block_boxes)
    )
    if holders is not None:
        return _encode_held(target, shard, part, blocks, block_boxes, holders, scattered=scattered)
    raw = []
    for block, box in zip(blocks, block_boxes, strict=True):
        common = intersect(box, part.region)
        if common is not None:
            raw.append((common, np.asarray(block)[box_to_slices(common, [a for a, _ in box])]))
    return _assemble(target, shard, part, raw, {}, old)


def _encode_held(
    target: WriteTarget,
    shard: Coords,
    part: PartPlan,
    blocks: tuple[Any, ...],
    block_boxes: tuple[Box, ...],
    holders: list[int],
    *,
    scattered: bool = False,
) -> Iterator[tuple[int, EncodedChunk | None]]:
    """Encode each chunk of ``part`` from ``blocks[holders[i]]``, lazily, in C order.

    Only for chains that compress (:func:`_on_canvas`: raw chunks go on a
    canvas instead). ``scattered``: chunks may come as several buffers
    (:meth:`~shardpipe.codec.chunk_codec.ChunkCodec.encode_scattered`).
    While cores are idle, up to ``target.encoders`` chunks are encoded at
    once (:func:`~shardpipe.engine.encoders.encode_in_order`).
    """
    codec = target.codec
    encode: Callable[[np.ndarray], EncodedChunk | None] = (
        codec.encode_scattered if scattered else codec.encode
    )

    def encode_job(job: tuple[int, np.ndarray]) -> tuple[int, Any]:
        slot, chunk = job
        return slot, encode(chunk)

    jobs = _held_chunks(target, shard, part, blocks, block_boxes, holders)
    return encode_in_order(encode_job, jobs, target.encoders)


def _held_chunks(
    target: WriteTarget,
    shard: Coords,
    part: PartPlan,
    blocks: tuple[Any, ...],
    block_boxes: tuple[Box, ...],
    holders: list[int],
) -> Iterator[tuple[int, np.ndarray]]:
    """Each chunk of ``part``, lazily, in C order: its index slot and its view."""
    layout = target.layout
    slot_of = target.shard_format.slot
    block_origins = [[start for start, _ in box] for box in block_boxes]
    boxes = part.chunks.chunk_boxes(layout, shard)
    for local, box, i in zip(part.chunks.chunks(), boxes, holders, strict=True):
        yield slot_of(local), blocks[i][box_to_slices(box, block_origins[i])]


def _on_canvas(target: WriteTarget, old: OldChunks | None) -> bool:
    """Whether a part cut from blocks goes on a canvas, not chunk by chunk from its blocks.

    With old content to merge (an update's partly covered chunks), and for
    chains that encode raw bytes: one paste of the part, then each slot
    checksummed in place, costs less than a copy per chunk (measured in
    whole writes).
    """
    return old is not None or target.codec.encodes_raw


def _in_order(
    shard_format: ShardFormat, part: PartPlan, encoded: dict[int, Buffer | None]
) -> list[tuple[int, Buffer | None]]:
    """Every chunk of ``part`` in C order of its local grid coordinates (None: not stored)."""
    return [
        (shard_format.slot(local), encoded.get(shard_format.slot(local)))
        for local in part.chunks.chunks()
    ]


@overload
def stored_only(encoded: Iterable[tuple[int, Buffer | None]]) -> Iterator[tuple[int, Buffer]]: ...


@overload
def stored_only(
    encoded: Iterable[tuple[int, EncodedChunk | None]],
) -> Iterator[tuple[int, EncodedChunk]]: ...


def stored_only(
    encoded: Iterable[tuple[int, EncodedChunk | None]],
) -> Iterator[tuple[int, EncodedChunk]]:
    """The chunks of ``encoded`` that are to be stored (lazily, in order)."""
    return ((slot, data) for slot, data in encoded if data is not None)


@overload
def encode_part(
    target: WriteTarget,
    shard: Coords,
    part: PartPlan,
    sources: tuple[Any, ...],
    block_boxes: tuple[Box, ...] | None,
    old: OldChunks | None = None,
    *,
    scattered: Literal[False] = False,
) -> Iterable[tuple[int, Buffer | None]]: ...


@overload
def encode_part(
    target: WriteTarget,
    shard: Coords,
    part: PartPlan,
    sources: tuple[Any, ...],
    block_boxes: tuple[Box, ...] | None,
    old: OldChunks | None = None,
    *,
    scattered: Literal[True],
) -> Iterable[tuple[int, EncodedChunk | None]]: ...


def encode_part(
    target: WriteTarget,
    shard: Coords,
    part: PartPlan,
    sources: tuple[Any, ...],
    block_boxes: tuple[Box, ...] | None,
    old: OldChunks | None = None,
    *,
    scattered: bool = False,
) -> Iterable[tuple[int, EncodedChunk | None]]:
    """Encode every chunk of ``part`` from its sources, in slot order (None: not stored).

    ``sources`` are the Dask blocks feeding the part (with ``block_boxes``)
    or the pieces they already made (``block_boxes`` None). ``old`` gives
    the old content of partly covered chunks (an update). A part cut from
    one block is encoded lazily, chunk by chunk as they are asked for, so
    that writing one chunk can overlap encoding the next. ``scattered``:
    a chunk may come as several buffers to write back to back (a
    compressed chunk and its CRC32C), for callers that lay chunks out
    (:func:`~shardpipe.formats.base.stream_shard`,
    :func:`~shardpipe.formats.base.lay_out_part`).
    """
    if block_boxes is None:
        return _gather(target, shard, part, sources, old)
    partial = old is not None and any(part.chunks.contains(c) for c in old.partial)
    merged = old if partial else None  # old content only where this part has some
    if part.is_direct and not _on_canvas(target, merged):
        holders = [0] * part.chunks.n_chunks
        return _encode_held(target, shard, part, sources, block_boxes, holders, scattered=scattered)
    return _cut_in_task(target, shard, part, sources, block_boxes, merged, scattered=scattered)
