"""The shape of the parts a shard is written in, and how a shard is tiled by them.

Pure arithmetic on the shard layout and the Dask block grid; the memory
model (:mod:`shardpipe.core.memory`) says how many raw bytes a part may hold.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator

from shardpipe import advice
from shardpipe.core.grid import BlockGrid, ChunkBox, Shape, ShardLayout
from shardpipe.errors import PlanError


def block_alignment(layout: ShardLayout, blocks: BlockGrid) -> Shape | None:
    """Block shape in inner chunks, when blocks are regular multiples of chunks."""
    if not blocks.is_regular:
        return None
    out = []
    for c, b in zip(layout.chunk_shape, blocks.chunks, strict=True):
        size = b[0]
        if size % c:
            return None
        out.append(size // c)
    return tuple(out)


def choose_part_chunks(
    layout: ShardLayout, itemsize: int, budget: int, align: Shape | None = None
) -> Shape:
    """Choose the shape, in inner chunks, of the parts a shard is split into.

    Where Dask blocks are regular multiples of the inner chunks (``align``,
    the block shape in chunks) and one block fits ``budget``, parts are whole
    blocks, grown block by block (last dimension first) while they fit, so
    that part edges fall on block edges. Otherwise parts are slabs: the
    shard is cut along the first dimension first, then the next, until a
    part's raw size fits ``budget``.

    Raises
    ------
    PlanError
        If even one inner chunk does not fit the budget.
    """
    chunk_bytes = math.prod(layout.chunk_shape) * itemsize
    max_chunks = budget // chunk_bytes
    if max_chunks < 1:
        raise PlanError(
            f"one inner chunk {layout.chunk_shape} is {chunk_bytes} bytes, more than the "
            f"per-part budget of {budget} bytes; raise {advice.name('max_mem')} or use smaller "
            "chunks"
        )
    per_shard = layout.chunks_per_shard
    if math.prod(per_shard) <= max_chunks:
        return per_shard
    if align is not None:
        shape = [min(a, n) for a, n in zip(align, per_shard, strict=True)]
        if math.prod(shape) <= max_chunks:
            for d in reversed(range(layout.ndim)):
                limit = min(per_shard[d], max_chunks // (math.prod(shape) // shape[d]))
                if limit >= per_shard[d]:
                    shape[d] = per_shard[d]
                elif limit >= shape[d]:
                    shape[d] = limit - limit % shape[d]
            return tuple(shape)
    slab = list(per_shard)
    for d in range(layout.ndim):
        if math.prod(slab) <= max_chunks:
            break
        slab[d] = max(1, min(slab[d], max_chunks // math.prod(slab[d + 1 :])))
    return tuple(slab)


def tile(box: ChunkBox, step: Shape) -> Iterator[ChunkBox]:
    """Cut ``box`` into boxes of at most ``step`` chunks, in C order."""
    starts = [range(a, b, s) for a, b, s in zip(box.start, box.stop, step, strict=True)]
    for origin in itertools.product(*starts):
        stop = tuple(min(o + s, b) for o, s, b in zip(origin, step, box.stop, strict=True))
        yield ChunkBox(start=tuple(origin), stop=stop)
