"""Downsampling a region from the pieces of the blocks that hold it."""

from __future__ import annotations

import itertools
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardpipe.core.downsample import downsample_block
from shardpipe.core.downsample_region import downsample_region, is_piecewise, straddles
from shardpipe.core.grid import Box
from shardpipe.core.pyramid import region_nbytes
from tests.support.examples import scaled


def _cut(region: np.ndarray, edges: list[list[int]]) -> tuple[list[np.ndarray], list[Box]]:
    """``region`` cut at ``edges`` (per axis, inner edges) into pieces and their places."""
    bounds = [[0, *e, n] for e, n in zip(edges, region.shape, strict=True)]
    pieces, places = [], []
    for index in itertools.product(*(range(len(b) - 1) for b in bounds)):
        place = tuple((b[i], b[i + 1]) for b, i in zip(bounds, index, strict=True))
        pieces.append(region[tuple(slice(a, b) for a, b in place)])
        places.append(place)
    return pieces, places


@settings(max_examples=scaled(60), deadline=None)
@given(
    st.tuples(st.integers(1, 13), st.integers(1, 13), st.integers(1, 9)),
    st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 3)),
    st.sampled_from(["mean", "mode", "nearest"]),
    st.data(),
)
def test_a_region_from_its_pieces_equals_the_region_downsampled_whole(
    shape: tuple[int, int, int], step: tuple[int, int, int], method: str, data: st.DataObject
) -> None:
    region = np.random.default_rng(sum(shape)).integers(0, 5, shape).astype("uint16")
    edges = [sorted(data.draw(st.sets(st.integers(1, n - 1), max_size=3))) if n > 1 else []
             for n in shape]  # fmt: skip
    pieces, places = _cut(region, edges)
    out = downsample_region(*pieces, places=places, region=shape, factor=step, method=method)
    assert np.array_equal(out, downsample_block(region, step, method))


def test_pieces_on_windows_edges_are_downsampled_piecewise_else_joined() -> None:
    assert is_piecewise([((0, 4), (0, 6)), ((4, 7), (0, 6))], (2, 2), (7, 6))  # 7: the end
    assert not is_piecewise([((0, 3), (0, 6)), ((3, 7), (0, 6))], (2, 2), (7, 6))
    assert not straddles(((100, 100, 12), (300, 124)), (2, 2))
    assert straddles(((99, 101), (300,)), (2, 1))
    assert not straddles(((99, 101), (300,)), (1, 2))  # axis 0 is not downsampled


@pytest.mark.parametrize("method", ["mean", "mode", "nearest"])
@pytest.mark.parametrize(
    "edges", [[[8], [20], [12]], [[7], [19], [13]]], ids=["piecewise", "joined"]
)
def test_region_nbytes_covers_what_the_task_holds(method: str, edges: list[list[int]]) -> None:
    shape, step = (24, 40, 36), (2, 2, 2)
    region = (np.arange(np.prod(shape)) % 7).astype("uint16").reshape(shape)
    pieces, places = _cut(region, edges)
    joined = not is_piecewise(places, step, shape)
    assert joined == (edges[0] == [7])
    tracemalloc.start()
    downsample_region(*pieces, places=places, region=shape, factor=step, method=method)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    # the pieces (views of blocks the task is handed, the region's bytes) are held too
    assert peak + region.nbytes <= region_nbytes(shape, step, region.dtype, method, joined=joined)
