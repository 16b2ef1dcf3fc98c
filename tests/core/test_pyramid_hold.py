"""What a pyramid's levels hold between tasks: reading order, parents, spans, by hand."""

from __future__ import annotations

import numpy as np

from shardpipe.core.pyramid_hold import (
    LevelHold,
    block_places,
    pyramid_holds,
    region_parents,
    source_places,
)


def test_regions_take_the_blocks_their_windows_overlap() -> None:
    # level 0 in blocks of 4 along one axis (14 voxels); level 1 from regions of 3 windows of 2
    parents = region_parents([(4, 4, 4, 2)], [(3, 3, 1)], [2])
    assert parents == [[range(0, 2), range(1, 3), range(3, 4)]]
    # an axis not downsampled keeps its blocks' regions one for one
    assert region_parents([(5, 5)], [(5, 5)], [1]) == [[range(0, 1), range(1, 2)]]


def test_the_source_is_read_in_c_order() -> None:
    np.testing.assert_array_equal(block_places([2, 3]), [[0, 1, 2], [3, 4, 5]])


def test_a_deeper_level_is_read_by_the_place_of_its_last_parent_then_in_c_order() -> None:
    # the second row comes from the first parents: it is read before the first row's end
    last_parent = np.array([[3, 7], [3, 5]])
    np.testing.assert_array_equal(block_places([2, 2], last_parent), [[0, 3], [1, 2]])


def test_blocks_inside_shards_are_read_shard_by_shard_the_shards_in_morton_order() -> None:
    # blocks of 2 along each axis, shards of 4: four blocks per shard
    places = source_places([(2, 2, 2, 2), (2, 2, 2, 2)], (4, 4))
    shard_of = {(i, j): (i // 2, j // 2) for i in range(4) for j in range(4)}
    order = sorted(shard_of, key=lambda b: places[b])
    # each shard's blocks one after the other, in C order
    assert order[:4] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert [shard_of[b] for b in order[::4]] == [(0, 0), (1, 0), (0, 1), (1, 1)]  # Morton
    # blocks of (4, 2) in shards of (4, 4), 16 x 16 shards: every 8 blocks read one after
    # the other are the 2 x 2 shards making one shard of the next level
    places = source_places([(4,) * 16, (2,) * 32], (4, 4))
    runs = [
        {(i // 2, j // 4) for i in range(16) for j in range(32) if places[i, j] // 8 == n}
        for n in range(16 * 32 // 8)
    ]
    assert all(len(run) == 1 for run in runs)


def test_blocks_across_shards_are_read_in_c_order() -> None:
    places = source_places([(3, 3, 2), (4, 4)], (4, 4))
    np.testing.assert_array_equal(places, [[0, 1], [2, 3], [4, 5]])
    # a block starting inside a shard at an offset crosses into the next
    np.testing.assert_array_equal(source_places([(4, 4)], (4,), offset=(2,)), [0, 1])
    np.testing.assert_array_equal(source_places([(4, 4)], (4,), offset=(4,)), [0, 1])


def _holds(**given: object) -> list[LevelHold]:
    kwargs: dict[str, object] = {"itemsize": 2, "read_ahead": 1} | given
    return pyramid_holds(**kwargs)  # type: ignore[arg-type]


def test_each_level_holds_its_widest_task_plus_the_blocks_read_ahead() -> None:
    # one axis: 8 blocks of 4 at level 0, parts of 2 blocks each; level 1 made from regions
    # of 4 windows of 2 (two blocks of level 0 each), written in parts of 2 of its blocks
    holds = _holds(
        chunks=[((4,) * 8,), ((4,) * 4,)],
        steps=[(1,), (2,)],
        parts=[
            [((0,), (1,)), ((2,), (3,)), ((4,), (5,)), ((6,), (7,))],
            [((0,), (1,)), ((2,), (3,))],
        ],
        free=[False, False],
        linked=[False, True],
        shard_shapes=[(8,), (8,)],
    )
    assert holds == [LevelHold(0, 2, 1, 8, 8, 64), LevelHold(1, 2, 1, 4, 8, 32)]
    assert [h.blocks for h in holds] == [3, 3]
    assert [h.nbytes for h in holds] == [24, 24]
    assert [h.waiting_nbytes for h in holds] == [16, 16]


def test_a_region_across_a_row_of_blocks_waits_for_the_whole_row() -> None:
    # level 0 in 2 x 4 blocks of (2, 2), read along the second axis first (the blocks cross
    # the shards of (4, 3)); a region of (4, 2) voxels (one window) takes blocks (0, j)
    # and (1, j), 4 places apart
    holds = _holds(
        chunks=[((2, 2), (2, 2, 2, 2)), ((1,), (1, 1, 1, 1))],
        steps=[(1, 1), (4, 2)],
        parts=[[((0, j),) for j in range(4)] + [((1, j),) for j in range(4)], []],
        free=[False, True],
        linked=[False, True],
        shard_shapes=[(4, 3), (1, 2)],
        read_ahead=2,
    )
    assert holds[0].span == 5
    assert holds[0].blocks == 7  # 5 + 2 read ahead, of the 8
    assert holds[1].nbytes == 0  # views of memory cost nothing


def test_no_level_holds_more_than_all_its_blocks() -> None:
    # 3 uneven blocks (the largest 10 of 12 elements), all taken by one task
    (hold,) = _holds(
        chunks=[((10, 1, 1),)],
        steps=[(1,)],
        parts=[[((0,), (1,), (2,))]],
        free=[False],
        linked=[False],
        shard_shapes=[(4,)],
    )
    assert (hold.span, hold.blocks, hold.block_nbytes) == (3, 3, 20)
    assert hold.nbytes == hold.waiting_nbytes == 24
