"""Which inner chunks a batch of region writes touches, shard by shard, and what fills each.

A batch (:func:`shardpipe.write_regions`) is a list of boxes of the array,
each with its data, applied as one job. Every shard a box touches gets one
writer, which must know, for each inner chunk that any box touches, where
its new content comes from. :func:`group_by_shard` answers that without
I/O: the boxes touching the chunk, in the batch's order (a later box wins
where boxes overlap), starting at the last one that covers the chunk whole
(nothing before it shows), or, when none does, on top of the chunk's old
content, which the writer reads and decodes::

    chunk    |.........|           boxes: 0 covers it whole, 1 and 2 part of it
    box 0  |===============|
    box 1       |==|                base: box 0; then box 1, then box 2 pasted
    box 2            |=======|

Only chunks some box touches are listed: the others keep their bytes.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from shardpipe.core.grid import Box, Coords, ShardLayout, box_contains, ceildiv


@dataclass(frozen=True)
class ChunkFill:
    """Where the new content of one touched inner chunk comes from.

    Parameters
    ----------
    local : tuple of int
        The chunk's coordinates inside its shard.
    box : Box
        Its elements inside the array (an edge chunk's box is cut at the end).
    boxes : tuple of int
        Positions in the batch of the boxes to paste, in order.
    whole : bool
        Whether ``boxes[0]`` covers the chunk whole: it is the base and the
        old content is not needed. Otherwise the base is the old content (or
        the fill value where the chunk is not stored).
    """

    local: Coords
    box: Box
    boxes: tuple[int, ...]
    whole: bool

    @property
    def single(self) -> bool:
        """Whether one box gives the whole chunk (it can be encoded from that box's data)."""
        return self.whole and len(self.boxes) == 1


def shards_touched(layout: ShardLayout, box: Box) -> Sequence[range]:
    """Per dimension, the shards that ``box`` (not empty, inside the array) touches."""
    return tuple(
        range(start // s, ceildiv(stop, s))
        for (start, stop), s in zip(box, layout.shard_shape, strict=True)
    )


def group_by_shard(layout: ShardLayout, boxes: Sequence[Box]) -> dict[Coords, list[ChunkFill]]:
    """The touched inner chunks of every shard the ``boxes`` touch, in C order of both.

    Empty boxes touch nothing. Boxes must lie inside the array (checked by
    the caller).
    """
    touching: dict[Coords, dict[Coords, list[int]]] = {}
    for position, box in enumerate(boxes):
        if any(start >= stop for start, stop in box):
            continue
        chunk_ranges = [
            range(start // c, ceildiv(stop, c))
            for (start, stop), c in zip(box, layout.chunk_shape, strict=True)
        ]
        per_shard = [s // c for s, c in zip(layout.shard_shape, layout.chunk_shape, strict=True)]
        for chunk in itertools.product(*chunk_ranges):
            shard = tuple(i // n for i, n in zip(chunk, per_shard, strict=True))
            local = tuple(i % n for i, n in zip(chunk, per_shard, strict=True))
            touching.setdefault(shard, {}).setdefault(local, []).append(position)
    groups: dict[Coords, list[ChunkFill]] = {}
    for shard in sorted(touching):
        fills = []
        for local, positions in sorted(touching[shard].items()):
            chunk_box = layout.clip(layout.chunk_box(shard, local))
            assert chunk_box is not None  # a box inside the array touched it
            base = next(
                (
                    i
                    for i in range(len(positions) - 1, -1, -1)
                    if box_contains(boxes[positions[i]], chunk_box)
                ),
                None,
            )
            kept = positions if base is None else positions[base:]
            fills.append(ChunkFill(local, chunk_box, tuple(kept), base is not None))
        groups[shard] = fills
    return groups
