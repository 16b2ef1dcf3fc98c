"""Regions: a source placed inside an array, checked against brute force over elements."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardpipe.core.grid import BlockGrid, ShardLayout, chunks_in_array
from shardpipe.core.region import Placement
from shardpipe.errors import PlanError
from shardpipe.testing.strategies import block_chunks
from tests.support.examples import scaled

SETTINGS = settings(max_examples=scaled(80), deadline=None)


@st.composite
def placements(draw: st.DrawFn) -> Placement:
    """A layout and a source of any chunking placed in a random region of it."""
    ndim = draw(st.integers(1, 3))
    chunk = tuple(draw(st.integers(1, 3)) for _ in range(ndim))
    shard = tuple(c * draw(st.integers(1, 3)) for c in chunk)
    shape = tuple(draw(st.integers(1, 2 * s + 2)) for s in shard)
    offset, size = [], []
    for n in shape:
        start = draw(st.integers(0, n - 1))
        offset.append(start)
        size.append(draw(st.integers(1, n - start)))
    blocks = BlockGrid(tuple(draw(block_chunks(n)) for n in size))
    return Placement(ShardLayout(shape, shard, chunk), blocks, tuple(offset))


def _elements_in_array(layout: ShardLayout, shard, local):
    """Every element of an inner chunk that lies in the array."""
    ranges = []
    for i, j, s, c, n in zip(
        shard, local, layout.shard_shape, layout.chunk_shape, layout.shape, strict=True
    ):
        start = i * s + j * c
        ranges.append(range(start, min(start + c, n)))
    return itertools.product(*ranges)


def _inside(point, box) -> bool:
    return all(a <= p < b for p, (a, b) in zip(point, box, strict=True))


@given(placements())
@SETTINGS
def test_coverage_matches_brute_force(placement: Placement) -> None:
    layout, region = placement.layout, placement.region
    touched_shards = set()
    for shard in layout.shard_coords():
        coverage = placement.coverage(shard)
        for local in chunks_in_array(layout, shard).chunks():
            inside = [_inside(p, region) for p in _elements_in_array(layout, shard, local)]
            assert coverage.touched.contains(local) == any(inside), (shard, local)
            assert coverage.is_full(local) == all(inside), (shard, local)
            if any(inside):
                touched_shards.add(shard)
        partial = set(coverage.partial_chunks())
        assert len(partial) == coverage.n_partial
        assert coverage.n_full + coverage.n_partial + coverage.n_untouched == (
            chunks_in_array(layout, shard).n_chunks
        )
    assert set(placement.shards()) == touched_shards
    assert placement.n_shards == len(touched_shards)


@given(placements())
@SETTINGS
def test_blocks_are_placed_at_the_offset(placement: Placement) -> None:
    region = placement.region
    numblocks = [len(c) for c in placement.blocks.chunks]
    boxes = [placement.block_box(b) for b in itertools.product(*map(range, numblocks))]
    cells = sum(1 for box in boxes for _ in itertools.product(*(range(a, b) for a, b in box)))
    assert cells == math.prod(b - a for a, b in region)
    for box in boxes:
        assert all(r0 <= a and b <= r1 for (a, b), (r0, r1) in zip(box, region, strict=True))
    # blocks_touching answers in array coordinates
    for box in boxes:
        for block in placement.blocks_touching(box):
            other = placement.block_box(block)
            assert all(a < d and c < b for (a, b), (c, d) in zip(box, other, strict=True))


def test_whole_array_covers_every_chunk_fully() -> None:
    layout = ShardLayout((10, 7), (4, 4), (2, 2))
    placement = Placement.whole(layout, BlockGrid(((3, 7), (7,))))
    assert placement.is_whole_array
    for shard in layout.shard_coords():
        coverage = placement.coverage(shard)
        assert coverage.is_whole_shard
        assert coverage.n_partial == 0 and coverage.n_untouched == 0


@pytest.mark.parametrize(
    ("offset", "size", "full", "partial"),
    [
        ((0,), (8,), 4, 0),  # one whole shard of 8 elements: 4 chunks of 2
        ((1,), (6,), 2, 2),  # [1, 7): chunks 0 and 3 partly covered
        ((2,), (2,), 1, 0),  # exactly chunk 1
        ((3,), (1,), 0, 1),  # one element of chunk 1
    ],
)
def test_coverage_table(offset, size, full, partial) -> None:
    layout = ShardLayout((8,), (8,), (2,))
    placement = Placement(layout, BlockGrid(((size[0],),)), offset)
    coverage = placement.coverage((0,))
    assert (coverage.n_full, coverage.n_partial) == (full, partial)


def test_region_outside_the_array_is_refused() -> None:
    layout = ShardLayout((8, 8), (4, 4), (2, 2))
    with pytest.raises(PlanError, match="does not fit inside the array"):
        Placement(layout, BlockGrid(((4,), (4,))), (6, 0))
    with pytest.raises(PlanError, match="dimensions"):
        Placement(layout, BlockGrid(((4,),)), (0,))
