"""Tests of ``shardpipe.core.cut``: chunk runs of boxes and blocks holding chunks whole."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from shardpipe.core.cut import box_runs, chunk_runs, whole_chunk_blocks
from shardpipe.core.grid import BlockGrid, ChunkBox, ShardLayout
from shardpipe.testing.strategies import block_chunks
from tests.support.examples import scaled

SETTINGS = settings(max_examples=scaled(200), deadline=None)


def test_chunk_runs_table() -> None:
    def runs(lo: int, hi: int) -> list[tuple[int, int, int, int, int]]:
        return [(r.chunk, r.n_chunks, r.start, r.stop, r.offset) for r in chunk_runs(lo, hi, 64)]

    assert runs(0, 64) == [(0, 1, 0, 64, 0)]
    assert runs(0, 256) == [(0, 4, 0, 64, 0)]
    assert runs(10, 20) == [(0, 1, 10, 20, 0)]
    assert runs(100, 200) == [(1, 1, 36, 64, 0), (2, 1, 0, 64, 28), (3, 1, 0, 8, 92)]
    assert runs(10, 300) == [(0, 1, 10, 64, 0), (1, 3, 0, 64, 54), (4, 1, 0, 44, 246)]
    assert runs(63, 65) == [(0, 1, 63, 64, 0), (1, 1, 0, 1, 1)]
    assert runs(5, 5) == []


@given(chunk=st.integers(1, 9), lo=st.integers(0, 60), length=st.integers(0, 60))
@SETTINGS
def test_chunk_runs_cover_each_element_once_in_order(chunk: int, lo: int, length: int) -> None:
    hi = lo + length
    runs = chunk_runs(lo, hi, chunk)
    assert len(runs) <= 3
    seen = []
    for r in runs:
        assert 0 <= r.start < r.stop <= chunk
        if r.n_chunks > 1:
            assert (r.start, r.stop) == (0, chunk)  # several chunks: whole ones
        for k in range(r.n_chunks):
            for i in range(r.start, r.stop):
                position = (r.chunk + k) * chunk + i
                assert position - lo == r.offset + k * r.width + (i - r.start)
                seen.append(position)
    assert seen == list(range(lo, hi))


@given(data=st.data())
@SETTINGS
def test_box_runs_is_chunk_runs_per_dimension(data: st.DataObject) -> None:
    ndim = data.draw(st.integers(1, 3))
    chunk_shape = tuple(data.draw(st.integers(1, 6)) for _ in range(ndim))
    origin = tuple(data.draw(st.integers(0, 3)) * c for c in chunk_shape)
    box = []
    for o in origin:
        lo = o + data.draw(st.integers(0, 20))
        box.append((lo, lo + data.draw(st.integers(1, 20))))
    per_dim = box_runs(tuple(box), origin, chunk_shape)
    for (lo, hi), o, c, runs in zip(box, origin, chunk_shape, per_dim, strict=True):
        assert runs == chunk_runs(lo - o, hi - o, c)


@st.composite
def layouts_and_blocks(draw: st.DrawFn) -> tuple[ShardLayout, BlockGrid]:
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(1, 20)) for _ in range(ndim))
    chunk_shape = tuple(draw(st.integers(1, 5)) for _ in range(ndim))
    shard_shape = tuple(c * draw(st.integers(1, 3)) for c in chunk_shape)
    if draw(st.booleans()):  # blocks on chunk edges: chunks are often whole in blocks
        sizes = tuple(_chunk_multiples(draw, n, c) for n, c in zip(shape, chunk_shape, strict=True))
    else:
        sizes = tuple(draw(block_chunks(n)) for n in shape)
    return ShardLayout(shape, shard_shape, chunk_shape), BlockGrid(sizes)


def _chunk_multiples(draw: st.DrawFn, n: int, c: int) -> tuple[int, ...]:
    out, pos = [], 0
    while pos < n:
        step = min(n - pos, c * draw(st.integers(1, 3)))
        out.append(step)
        pos += step
    return tuple(out)


@given(problem=layouts_and_blocks(), data=st.data())
@SETTINGS
def test_whole_chunk_blocks_matches_brute_force(
    problem: tuple[ShardLayout, BlockGrid], data: st.DataObject
) -> None:
    layout, grid = problem
    all_blocks = [
        grid.block_box(b) for b in itertools.product(*(range(len(s)) for s in grid.chunks))
    ]
    shard = tuple(data.draw(st.integers(0, g - 1)) for g in layout.shard_grid)
    per_shard = layout.chunks_per_shard
    start = tuple(data.draw(st.integers(0, n - 1)) for n in per_shard)
    stop = tuple(data.draw(st.integers(a + 1, n)) for a, n in zip(start, per_shard, strict=True))
    chunks = ChunkBox(start, stop)
    chunk_boxes = [layout.clip(layout.chunk_box(shard, local)) for local in chunks.chunks()]
    if any(box is None for box in chunk_boxes):
        return  # chunks wholly past the array's edge are never asked about
    given_blocks = data.draw(st.lists(st.sampled_from(all_blocks), unique=True, min_size=1))
    expected: list[int] | None = []
    for box in chunk_boxes:
        assert box is not None
        holders = [
            i
            for i, block in enumerate(given_blocks)
            if all(b0 <= c0 and c1 <= b1 for (c0, c1), (b0, b1) in zip(box, block, strict=True))
        ]
        if not holders:
            expected = None
            break
        assert expected is not None
        expected.append(holders[0])
    assert whole_chunk_blocks(layout, shard, chunks, given_blocks) == expected
