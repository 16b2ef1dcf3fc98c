"""How one Dask block holds the inner chunks of one part: whole, or straddling its edges.

A block encodes the inner chunks it holds whole where it lives and sends raw
only the bits of chunks that straddle its edges (see
:class:`~shardpipe.core.plan.PartPlan`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from shardpipe.core.grid import Box, Coords, ShardLayout, intersect
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
