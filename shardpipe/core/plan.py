"""Write plans: which Dask blocks feed which shard, and in how many parts.

A plan is an inspectable value computed before anything runs. It maps a
Dask block grid onto a shard layout:

* every shard is written by **parts**: boxes of inner chunks whose raw size
  fits the memory budget. A shard that fits is one part and is published in
  one go by the task that writes that part. A larger shard has several
  parts, written independently, and a final *stamp* step that writes the
  index and publishes the shard;
* a part either lies inside one Dask block (*direct*: the task holding that
  block slices, encodes and writes it) or gathers *pieces* from several
  blocks: each block encodes the inner chunks it holds whole and sends raw
  only the bits of chunks that straddle block edges.

Projected memory (per task, in bytes)::

    direct part      block + encoded part
    piece            block + piece of the part it feeds
    gathered part    pieces + assembled part + encoded part  (<= 3 x part)
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property

from shardpipe.core.grid import (
    BlockGrid,
    Box,
    ChunkBox,
    Coords,
    Shape,
    ShardLayout,
    box_size,
    chunks_in_array,
    intersect,
)
from shardpipe.errors import ShardpipeError


class PlanError(ShardpipeError, ValueError):
    """A write cannot be planned within the given limits."""


@dataclass(frozen=True)
class PartPlan:
    """One part of a shard: a box of inner chunks and the blocks feeding it.

    Parameters
    ----------
    number : int
        Position of the part in the shard, from 0.
    chunks : ChunkBox
        The inner chunks of the part (local to the shard).
    region : Box
        Elements of the array the part covers, clipped to the array.
    blocks : tuple of Coords
        The Dask blocks that hold those elements.
    """

    number: int
    chunks: ChunkBox
    region: Box
    blocks: tuple[Coords, ...]

    @property
    def is_direct(self) -> bool:
        """Whether one block holds the whole part."""
        return len(self.blocks) == 1


@dataclass(frozen=True)
class ShardPlan:
    """The parts of one shard.

    Parameters
    ----------
    coords : Coords
        Grid coordinates of the shard.
    parts : tuple of PartPlan
        Its parts, in the order their bytes appear in the shard.
    """

    coords: Coords
    parts: tuple[PartPlan, ...]

    @property
    def is_single_part(self) -> bool:
        """Whether the shard is written by one task in one go."""
        return len(self.parts) == 1


@dataclass(frozen=True)
class WritePlan:
    """How a Dask array becomes shards, planned before anything runs.

    Parameters
    ----------
    layout : ShardLayout
        Shard and inner-chunk grids of the target array.
    blocks : BlockGrid
        Dask block grid of the source array.
    itemsize : int
        Bytes per element.
    max_mem : int
        Memory budget per task in bytes.
    part_chunks : Shape
        Shape of a (non-edge) part, in inner chunks.
    shards : tuple of ShardPlan
        One entry per shard, in C order of the shard grid.
    """

    layout: ShardLayout
    blocks: BlockGrid
    itemsize: int
    max_mem: int
    part_chunks: Shape
    shards: tuple[ShardPlan, ...] = field(repr=False)

    @property
    def part_nbytes(self) -> int:
        """Raw bytes of one full part."""
        chunk = math.prod(self.layout.chunk_shape)
        return math.prod(self.part_chunks) * chunk * self.itemsize

    @property
    def block_nbytes(self) -> int:
        """Raw bytes of the largest Dask block."""
        return self.blocks.max_block_elements * self.itemsize

    @cached_property
    def num_tasks(self) -> int:
        """Number of tasks the plan adds to the graph (pieces, parts and stamps)."""
        n = 0
        for shard in self.shards:
            for part in shard.parts:
                n += 1 if part.is_direct else 1 + len(part.blocks)
            if not shard.is_single_part:
                n += 2  # begin + stamp
        return n

    @property
    def max_parts_per_shard(self) -> int:
        """Largest number of parts in one shard."""
        return max((len(s.parts) for s in self.shards), default=0)

    @cached_property
    def max_projected_mem(self) -> int:
        """Largest memory any task is expected to hold, in bytes."""
        worst = 0
        for shard in self.shards:
            for part in shard.parts:
                raw = box_size(part.region) * self.itemsize
                if part.is_direct:
                    worst = max(worst, self.block_nbytes + raw)
                else:
                    worst = max(worst, self.block_nbytes + raw, 3 * self.part_nbytes)
        return worst

    def __repr__(self) -> str:
        n_multi = sum(not s.is_single_part for s in self.shards)
        return (
            f"WritePlan(shape={self.layout.shape}, shards={self.layout.shard_shape}, "
            f"chunks={self.layout.chunk_shape}, n_shards={len(self.shards)}, "
            f"multipart_shards={n_multi}, part_chunks={self.part_chunks}, "
            f"num_tasks={self.num_tasks}, max_projected_mem={_fmt_bytes(self.max_projected_mem)}, "
            f"max_mem={_fmt_bytes(self.max_mem)})"
        )


def _fmt_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    raise AssertionError  # pragma: no cover


def _block_alignment(layout: ShardLayout, blocks: BlockGrid) -> Shape | None:
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
    that each part is fed by a single block. Otherwise parts are slabs: the
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
            f"per-part budget of {budget} bytes (max_mem / 3); raise max_mem or use smaller chunks"
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


def _tile(box: ChunkBox, step: Shape) -> Iterator[ChunkBox]:
    """Cut ``box`` into boxes of at most ``step`` chunks, in C order."""
    starts = [range(a, b, s) for a, b, s in zip(box.start, box.stop, step, strict=True)]
    for origin in itertools.product(*starts):
        stop = tuple(min(o + s, b) for o, s, b in zip(origin, step, box.stop, strict=True))
        yield ChunkBox(start=tuple(origin), stop=stop)


def plan_write(
    layout: ShardLayout,
    blocks: BlockGrid,
    itemsize: int,
    max_mem: int,
    *,
    max_parts: int | None = None,
) -> WritePlan:
    """Plan the write of an array with Dask blocks ``blocks`` into ``layout``.

    Parameters
    ----------
    layout : ShardLayout
        Target shard and inner-chunk grids.
    blocks : BlockGrid
        Source Dask block grid; its shape must equal ``layout.shape``.
    itemsize : int
        Bytes per element.
    max_mem : int
        Memory budget per task in bytes.
    max_parts : int, optional
        Most parts one shard may have (10,000 on S3).

    Raises
    ------
    PlanError
        If the budget cannot be met or a shard would need too many parts.
    """
    if blocks.shape != layout.shape:
        raise PlanError(f"block grid shape {blocks.shape} differs from array shape {layout.shape}")
    block_nbytes = blocks.max_block_elements * itemsize
    if block_nbytes > max_mem:
        raise PlanError(
            f"the largest Dask block holds {block_nbytes} bytes, more than max_mem={max_mem}; "
            "rechunk the Dask array into smaller blocks or raise max_mem"
        )
    part_chunks = choose_part_chunks(
        layout, itemsize, max(max_mem // 3, 1), _block_alignment(layout, blocks)
    )
    shards = []
    for coords in layout.shard_coords():
        parts = []
        for number, chunk_box in enumerate(_tile(chunks_in_array(layout, coords), part_chunks)):
            region = layout.clip(chunk_box.element_box(layout, coords))
            assert region is not None  # chunks_in_array only yields chunks inside the array
            feeding = tuple(blocks.blocks_touching(region))
            parts.append(PartPlan(number, chunk_box, region, feeding))
        if max_parts is not None and len(parts) > max_parts:
            raise PlanError(
                f"shard {coords} needs {len(parts)} parts under max_mem={max_mem}, more than the "
                f"store allows ({max_parts}); raise max_mem or use smaller shards"
            )
        shards.append(ShardPlan(coords, tuple(parts)))
    return WritePlan(layout, blocks, itemsize, max_mem, part_chunks, tuple(shards))


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
