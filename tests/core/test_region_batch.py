"""Grouping a batch's boxes by shard and inner chunk (pure: no I/O)."""

from __future__ import annotations

from shardpipe.core.grid import ShardLayout
from shardpipe.core.region_batch import group_by_shard

LAYOUT = ShardLayout((20, 20), (8, 8), (4, 4))  # edge shards and chunks at 16..20


def test_boxes_are_grouped_by_shard_and_chunk_in_c_order() -> None:
    groups = group_by_shard(LAYOUT, [((17, 19), (1, 6)), ((0, 4), (0, 4)), ((3, 3), (0, 20))])
    assert list(groups) == [(0, 0), (2, 0)]  # the empty third box touches nothing
    assert [(f.local, f.boxes, f.whole) for f in groups[(0, 0)]] == [((0, 0), (1,), True)]
    edge = groups[(2, 0)]
    assert [f.local for f in edge] == [(0, 0), (0, 1)]
    assert edge[0].box == ((16, 20), (0, 4))  # an edge chunk's box stops at the array's end
    assert not edge[0].whole and edge[0].boxes == (0,)  # old content under the box


def test_the_last_box_covering_a_chunk_whole_is_its_base() -> None:
    boxes = [((0, 2), (0, 2)), ((0, 8), (0, 8)), ((1, 3), (1, 3)), ((0, 4), (0, 4))]
    first = group_by_shard(LAYOUT, boxes)[(0, 0)][0]
    assert first.local == (0, 0) and first.whole and first.single
    assert first.boxes == (3,)  # box 3 covers chunk (0, 0) whole and comes last
    second = group_by_shard(LAYOUT, boxes[:3])[(0, 0)][0]
    assert second.whole and not second.single and second.boxes == (1, 2)
    # an edge chunk is covered whole by a box reaching the array's end
    edge = group_by_shard(LAYOUT, [((16, 20), (16, 20))])[(2, 2)]
    assert [(f.local, f.whole) for f in edge] == [((0, 0), True)]
