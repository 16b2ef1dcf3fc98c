"""Tests of the shard / inner-chunk / Dask-block geometry in ``shardpipe.core.grid``."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardpipe.core.grid import (
    BlockGrid,
    ChunkBox,
    ShardLayout,
    box_contains,
    box_size,
    box_to_slices,
    ceildiv,
    chunks_in_array,
    chunks_in_region,
    intersect,
)
from shardpipe.formats.zarr_sharding import ZarrShardingFormat
from tests.support.examples import scaled

SETTINGS = settings(max_examples=scaled(100), deadline=None)


def overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """Whether two half-open intervals share at least one integer."""
    return max(a[0], b[0]) < min(a[1], b[1])


@st.composite
def layouts(draw: st.DrawFn, max_ndim: int = 3) -> ShardLayout:
    ndim = draw(st.integers(1, max_ndim))
    chunk = tuple(draw(st.integers(1, 4)) for _ in range(ndim))
    shard = tuple(c * draw(st.integers(1, 4)) for c in chunk)
    shape = tuple(draw(st.integers(1, 3 * s)) for s in shard)
    return ShardLayout(shape, shard, chunk)


def shards_of(layout: ShardLayout) -> st.SearchStrategy[tuple[int, ...]]:
    """The coordinates of any shard of ``layout``."""
    return st.tuples(*(st.integers(0, n - 1) for n in layout.shard_grid))


@st.composite
def block_grids(draw: st.DrawFn, min_block: int = 1) -> BlockGrid:
    """Rectilinear grids; ``min_block=0`` lets in zero-sized blocks (Dask makes them)."""
    ndim = draw(st.integers(1, 3))
    chunks = []
    for _ in range(ndim):
        sizes = draw(st.lists(st.integers(min_block, 5), min_size=1, max_size=6))
        if sum(sizes) == 0:
            sizes.append(draw(st.integers(1, 5)))
        chunks.append(tuple(sizes))
    return BlockGrid(tuple(chunks))


@st.composite
def grid_and_box(
    draw: st.DrawFn, min_block: int = 1
) -> tuple[BlockGrid, tuple[tuple[int, int], ...]]:
    grid = draw(block_grids(min_block))
    box = []
    for n in grid.shape:
        start = draw(st.integers(0, n - 1))
        box.append((start, draw(st.integers(start + 1, n))))
    return grid, tuple(box)


def brute_blocks_touching(grid: BlockGrid, box: tuple) -> list[tuple[int, ...]]:
    return [
        block
        for block in itertools.product(*(range(len(c)) for c in grid.chunks))
        if all(overlaps(b, x) for b, x in zip(grid.block_box(block), box, strict=True))
    ]


@given(grid_and_box())
@SETTINGS
def test_blocks_touching_matches_brute_force(case: tuple[BlockGrid, tuple]) -> None:
    grid, box = case
    assert list(grid.blocks_touching(box)) == brute_blocks_touching(grid, box)


@given(grid_and_box(min_block=0))
@SETTINGS
def test_blocks_touching_skips_zero_sized_blocks(case: tuple[BlockGrid, tuple]) -> None:
    # A zero-sized block holds no element, so it intersects no box.
    grid, box = case
    assert list(grid.blocks_touching(box)) == brute_blocks_touching(grid, box)


@pytest.mark.parametrize(
    ("chunks", "box", "expected"),
    [
        (((2, 2, 2),), ((1, 5),), [(0,), (1,), (2,)]),
        (((2, 2, 2),), ((2, 4),), [(1,)]),
        (((0, 3, 0),), ((0, 3),), [(1,)]),
        (((1, 0, 1),), ((0, 2),), [(0,), (2,)]),
        (((2, 0, 0, 2), (3,)), ((1, 3), (0, 1)), [(0, 0), (3, 0)]),
    ],
)
def test_blocks_touching_table(chunks, box, expected) -> None:
    assert list(BlockGrid(chunks).blocks_touching(box)) == expected


@given(block_grids(min_block=0))
@SETTINGS
def test_block_boxes_tile_the_array(grid: BlockGrid) -> None:
    assert grid.shape == tuple(sum(c) for c in grid.chunks)
    covered = np.zeros(grid.shape, dtype=np.int64)
    for block in itertools.product(*(range(len(c)) for c in grid.chunks)):
        box = grid.block_box(block)
        assert tuple(b - a for a, b in box) == tuple(
            c[i] for c, i in zip(grid.chunks, block, strict=True)
        )
        covered[box_to_slices(box)] += 1
    assert (covered == 1).all()


@pytest.mark.parametrize(
    ("chunks", "regular", "max_elements"),
    [
        (((4, 4, 2),), True, 4),
        (((4, 4, 4),), True, 4),
        (((4, 2, 4),), False, 4),
        (((2, 4),), False, 4),
        (((7,),), True, 7),
        (((3, 3), (5, 5, 1)), True, 15),
        (((3, 3), (5, 6)), False, 18),
    ],
)
def test_block_grid_regularity_table(chunks: tuple, regular: bool, max_elements: int) -> None:
    grid = BlockGrid(chunks)
    assert grid.is_regular is regular
    assert grid.max_block_elements == max_elements


@given(layouts(max_ndim=4), st.data())
@SETTINGS
def test_chunks_in_array_is_every_chunk_holding_an_element(
    layout: ShardLayout, data: st.DataObject
) -> None:
    shard = data.draw(shards_of(layout))
    box = chunks_in_array(layout, shard)
    expected = set()
    for local in itertools.product(*(range(n) for n in layout.chunks_per_shard)):
        elements = itertools.product(*(range(a, b) for a, b in layout.chunk_box(shard, local)))
        if any(all(x < n for x, n in zip(e, layout.shape, strict=True)) for e in elements):
            expected.add(local)
    assert box.start == (0,) * layout.ndim
    assert set(box.chunks()) == expected
    assert box.n_chunks == len(expected)


@given(layouts())
@SETTINGS
def test_chunks_in_array_of_all_shards_cover_the_array_once(layout: ShardLayout) -> None:
    covered = np.zeros(layout.shape, dtype=np.int64)
    for shard in layout.shard_coords():
        for local in chunks_in_array(layout, shard).chunks():
            clipped = layout.clip(layout.chunk_box(shard, local))
            assert clipped is not None
            covered[box_to_slices(clipped)] += 1
    assert (covered == 1).all()
    assert layout.n_shards == len(list(layout.shard_coords()))


@given(layouts(max_ndim=4), st.data())
@SETTINGS
def test_chunk_boxes_are_each_chunk_clipped_in_c_order(
    layout: ShardLayout, data: st.DataObject
) -> None:
    shard = data.draw(shards_of(layout))
    whole = chunks_in_array(layout, shard)
    start = tuple(data.draw(st.integers(0, n - 1)) for n in whole.stop)
    stop = tuple(data.draw(st.integers(a + 1, n)) for a, n in zip(start, whole.stop, strict=True))
    part = ChunkBox(start, stop)
    expected = [layout.clip(layout.chunk_box(shard, local)) for local in part.chunks()]
    assert list(part.chunk_boxes(layout, shard)) == expected


@given(layouts(max_ndim=4))
@SETTINGS
def test_zarr_slot_is_c_order_position(layout: ShardLayout) -> None:
    # slot order belongs to the shard format (zarr: C order of the shard's chunk grid)
    shard_format = ZarrShardingFormat(layout.chunks_per_shard)
    locals_ = list(itertools.product(*(range(n) for n in layout.chunks_per_shard)))
    slots = [shard_format.slot(local) for local in locals_]
    for local, slot in zip(locals_, slots, strict=True):
        assert slot == np.ravel_multi_index(local, layout.chunks_per_shard, order="C")
    assert slots == list(range(layout.n_chunks_per_shard))


@given(layouts(), st.data())
@SETTINGS
def test_chunk_and_shard_boxes_agree(layout: ShardLayout, data: st.DataObject) -> None:
    shard = data.draw(shards_of(layout))
    full = ChunkBox((0,) * layout.ndim, layout.chunks_per_shard)
    assert full.element_box(layout, shard) == layout.shard_box(shard)
    assert box_size(layout.shard_box(shard)) == full.n_chunks * box_size(
        layout.chunk_box(shard, (0,) * layout.ndim)
    )
    for local in full.chunks():
        one = ChunkBox(local, tuple(j + 1 for j in local))
        assert one.element_box(layout, shard) == layout.chunk_box(shard, local)
        assert box_contains(layout.shard_box(shard), layout.chunk_box(shard, local))


@pytest.mark.parametrize(
    ("shape", "shard", "chunk", "grid", "per_shard"),
    [
        ((10,), (4,), (2,), (3,), (2,)),
        ((8, 8), (4, 8), (2, 4), (2, 1), (2, 2)),
        ((1, 100, 7), (1, 64, 8), (1, 16, 4), (1, 2, 1), (1, 4, 2)),
        ((0, 5), (2, 2), (1, 1), (0, 3), (2, 2)),
    ],
)
def test_layout_grids_table(shape, shard, chunk, grid, per_shard) -> None:
    layout = ShardLayout(shape, shard, chunk)
    assert layout.shard_grid == grid
    assert layout.chunks_per_shard == per_shard
    assert layout.n_chunks_per_shard == int(np.prod(per_shard))


@pytest.mark.parametrize(
    ("shape", "shard", "chunk"),
    [
        ((10, 10), (4,), (2,)),
        ((10,), (4, 4), (2, 2)),
        ((10, 10), (4, 4), (2,)),
        ((10,), (5,), (2,)),
        ((10, 10), (4, 6), (2, 4)),
        ((10,), (4,), (0,)),
        ((10,), (0,), (2,)),
        ((10,), (-4,), (2,)),
        ((10,), (4,), (-2,)),
    ],
)
def test_layout_rejects_bad_shapes(shape, shard, chunk) -> None:
    with pytest.raises(ValueError, match="shape"):
        ShardLayout(shape, shard, chunk)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (((0, 4), (0, 4)), ((2, 6), (1, 3)), ((2, 4), (1, 3))),
        (((0, 4),), ((4, 6),), None),
        (((0, 4), (0, 4)), ((1, 2), (4, 5)), None),
        (((3, 5),), ((0, 10),), ((3, 5),)),
    ],
)
def test_intersect_table(a, b, expected) -> None:
    assert intersect(a, b) == expected
    assert intersect(b, a) == expected


def test_small_helpers() -> None:
    assert [ceildiv(a, 4) for a in (0, 1, 4, 5, 8, 9)] == [0, 1, 1, 2, 2, 3]
    assert box_to_slices(((1, 3), (0, 2))) == (slice(1, 3), slice(0, 2))
    assert box_to_slices(((5, 7),), origin=(4,)) == (slice(1, 3),)
    assert box_size(((1, 3), (0, 5))) == 10
    assert box_contains(((0, 4),), ((0, 4),))
    assert not box_contains(((0, 4),), ((1, 5),))


@st.composite
def _regions_and_chunks(draw: st.DrawFn) -> tuple[tuple[slice, ...], tuple[int, ...]]:
    ndim = draw(st.integers(1, 3))
    chunks = tuple(draw(st.integers(1, 5)) for _ in range(ndim))
    region = []
    for _ in range(ndim):
        start = draw(st.integers(0, 12))
        region.append(slice(start, start + draw(st.integers(1, 9))))
    return tuple(region), chunks


@given(_regions_and_chunks())
def test_chunks_in_region_cover_it_once_as_brute_force_cuts_it(case) -> None:  # type: ignore[no-untyped-def]
    region, chunk_shape = case
    shape = tuple(r.stop for r in region)
    labels = np.arange(np.prod(shape)).reshape(shape)  # each element labelled by its index
    filled = np.full(tuple(r.stop - r.start for r in region), -1)
    seen = []
    for coords, inside, into in chunks_in_region(region, chunk_shape):
        seen.append(coords)
        chunk = tuple(slice(i * c, (i + 1) * c) for i, c in zip(coords, chunk_shape, strict=True))
        padded = np.full(chunk_shape, -2)
        part = labels[chunk]
        padded[tuple(slice(0, n) for n in part.shape)] = part
        assert (filled[into] == -1).all()  # no element twice
        filled[into] = padded[inside]
    np.testing.assert_array_equal(filled, labels[region])
    expected = {
        tuple(i // c for i, c in zip(index, chunk_shape, strict=True))
        for index in itertools.product(*(range(r.start, r.stop) for r in region))
    }
    assert seen == sorted(expected)
