"""How one Dask block holds the inner chunks of one part: whole, or straddling its edges.

A block encodes the inner chunks it holds whole where it lives and sends raw
only the bits of chunks that straddle its edges (see
:class:`~shardpipe.core.shard_plan.PartPlan`).
"""

from __future__ import annotations

import itertools
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from shardpipe.core.grid import Box, ChunkBox, Coords, ShardLayout, intersect
from shardpipe.core.plan import PartPlan


@dataclass(frozen=True)
class PieceCut:
    """What one Dask block contributes to one part.

    Parameters
    ----------
    whole : tuple of Coords
        Local coordinates of inner chunks whose in-array elements all lie in
        the block: they are encoded where the block lives.
    region : Box or None
        The elements of the part the block holds (array coordinates); None
        when the block does not touch the part.
    touching : tuple of tuple of (int, int, int)
        Per dimension, ``(chunk index, start, stop)`` of every inner chunk of
        the part the block touches, with the overlap's extent.
    """

    whole: tuple[Coords, ...]
    region: Box | None
    touching: tuple[tuple[tuple[int, int, int], ...], ...]

    @property
    def partial(self) -> tuple[tuple[Coords, Box], ...]:
        """Inner chunks straddling the block's edge, with the box the block holds of each."""
        whole = set(self.whole)
        out = []
        for combo in itertools.product(*self.touching):
            local = tuple(j for j, _, _ in combo)
            if local not in whole:
                out.append((local, tuple((lo, hi) for _, lo, hi in combo)))
        return tuple(out)

    @property
    def raw_boxes(self) -> tuple[Box, ...]:
        """Boxes to send raw: the whole region when no chunk is whole, else each straddler."""
        if self.region is None:
            return ()
        if not self.whole:
            return (self.region,)
        return tuple(box for _, box in self.partial)


def cut_block(layout: ShardLayout, shard: Coords, part: PartPlan, block_box: Box) -> PieceCut:
    """Sort the inner chunks of ``part`` by how the block at ``block_box`` holds them.

    Works per dimension (boxes are products of intervals), so its cost grows
    with the number of chunks along each edge, not with their product, unless
    the block holds some chunks whole.
    """
    touching = []
    whole_per_dim = []
    for d, ((b0, b1), n, i, s, c) in enumerate(
        zip(block_box, layout.shape, shard, layout.shard_shape, layout.chunk_shape, strict=True)
    ):
        hits = []
        whole = []
        for j in range(part.chunks.start[d], part.chunks.stop[d]):
            lo = i * s + j * c
            hi = min(lo + c, n)
            if lo < b1 and hi > b0:
                hits.append((j, max(lo, b0), min(hi, b1)))
                if b0 <= lo and hi <= b1:
                    whole.append(j)
        touching.append(tuple(hits))
        whole_per_dim.append(whole)
    region = intersect(block_box, part.region)
    return PieceCut(tuple(itertools.product(*whole_per_dim)), region, tuple(touching))


class Run(NamedTuple):
    """A stretch of one dimension of a box, in inner-chunk terms.

    ``n_chunks`` consecutive chunks from chunk ``chunk`` on, elements
    ``[start, stop)`` of each; the run begins ``offset`` elements into the
    box. A run of several chunks takes them whole (``start`` 0, ``stop`` the
    chunk's extent).
    """

    chunk: int
    n_chunks: int
    start: int
    stop: int
    offset: int

    @property
    def width(self) -> int:
        """Elements of each chunk the run takes."""
        return self.stop - self.start


def chunk_runs(lo: int, hi: int, chunk: int) -> tuple[Run, ...]:
    """Split ``[lo, hi)`` (relative to a chunk boundary) into at most three runs.

    A partial chunk at the start, the whole chunks in the middle, a partial
    chunk at the end; a stretch inside one chunk is one run.
    """
    if lo >= hi:
        return ()
    runs = []
    first, last = lo // chunk, (hi - 1) // chunk
    if first == last:
        return (Run(first, 1, lo - first * chunk, hi - first * chunk, 0),)
    pos = lo
    if lo % chunk:
        runs.append(Run(first, 1, lo % chunk, chunk, 0))
        first += 1
        pos = first * chunk
    whole_stop = hi // chunk
    if whole_stop > first:
        runs.append(Run(first, whole_stop - first, 0, chunk, pos - lo))
        pos = whole_stop * chunk
    if pos < hi:
        runs.append(Run(whole_stop, 1, 0, hi - pos, pos - lo))
    return tuple(runs)


def box_runs(box: Box, origin: Coords, chunk_shape: Coords) -> tuple[tuple[Run, ...], ...]:
    """Per dimension, the runs of ``box`` over the inner chunks of a grid anchored at ``origin``.

    Every combination of one run per dimension is a product of chunk
    ranges and within-chunk ranges: one strided copy moves it between
    array order and chunk-major order (each chunk contiguous), so a box
    takes at most ``3 ** ndim`` copies whatever its size.
    """
    return tuple(
        chunk_runs(lo - o, hi - o, c)
        for (lo, hi), o, c in zip(box, origin, chunk_shape, strict=True)
    )


def whole_chunk_blocks(
    layout: ShardLayout, shard: Coords, chunks: ChunkBox, block_boxes: Sequence[Box]
) -> list[int] | None:
    """For each chunk of ``chunks`` (C order), the index of the block holding it whole.

    ``block_boxes`` are boxes of blocks of one rectilinear grid (any subset
    of it). None when some chunk is held whole by none of them: it
    straddles a block edge, or its block is not among them. Works per
    dimension, like :func:`cut_block`.
    """
    ranks: list[dict[tuple[int, int], int]] = []
    per_dim: list[list[int]] = []
    for d in range(layout.ndim):
        intervals = sorted({box[d] for box in block_boxes})
        starts = [lo for lo, _ in intervals]
        held = []
        for j in range(chunks.start[d], chunks.stop[d]):
            lo = shard[d] * layout.shard_shape[d] + j * layout.chunk_shape[d]
            hi = min(lo + layout.chunk_shape[d], layout.shape[d])
            k = bisect_right(starts, lo) - 1
            if k < 0 or intervals[k][1] < hi:
                return None
            held.append(k)
        ranks.append({interval: k for k, interval in enumerate(intervals)})
        per_dim.append(held)
    index = {
        tuple(rank[box[d]] for d, rank in enumerate(ranks)): i for i, box in enumerate(block_boxes)
    }
    holders = [index.get(combo) for combo in itertools.product(*per_dim)]
    return None if None in holders else [i for i in holders if i is not None]
