"""The precomputed shard formats behind the shard-format protocol, against brute force.

``shardpipe.formats.precomputed_shards`` maps slots to chunk ids and lays a
shard file out with the protocol's helpers (the ones the zarr writer uses);
these tests check it alone, with no I/O: slots against the Morton codes of
every chunk, shards in parts with padding, indexes the format's delta
encoding cannot hold.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardpipe.core.morton import morton_ids
from shardpipe.core.precomputed_plan import ScaleGrid, box_bits, shards_of
from shardpipe.errors import ShardFormatError
from shardpipe.formats.base import (
    ShardFormat,
    ShardIndex,
    assemble_shard,
    encode_stamped,
    lay_out_part,
    read_checked_index,
)
from shardpipe.formats.precomputed import PrecomputedSharding
from shardpipe.formats.precomputed_shards import BoxShards, ScatteredShard, shard_format_of
from tests.support.examples import scaled

grids = st.tuples(*[st.integers(1, 9)] * 3)


def _spec(hash_: str, preshift: int, minishard: int, shard: int) -> PrecomputedSharding:
    return PrecomputedSharding(
        preshift_bits=preshift,
        minishard_bits=minishard,
        shard_bits=shard,
        hash=hash_,
        minishard_index_encoding="gzip",
        data_encoding="raw",
    )


@settings(max_examples=scaled(60), deadline=None)
@given(grids, st.integers(0, 6), st.integers(0, 3), st.booleans())
def test_slots_name_every_chunk_once(
    grid: tuple[int, ...], preshift: int, minishard: int, murmur: bool
) -> None:
    scale = ScaleGrid(tuple(n * 4 for n in grid), (4, 4, 4))
    low = preshift + minishard
    spec = _spec("murmurhash3_x86_128" if murmur else "identity", preshift, minishard, 64 - low)
    seen = 0
    for shard in shards_of(scale, spec):
        shard_format = shard_format_of(scale, spec, shard)
        assert isinstance(shard_format, ShardFormat)
        assert isinstance(shard_format, ScatteredShard if murmur else BoxShards)
        slots, member = shard_format.slots((shard.shard,), shard.ids)
        assert member.all() and len(set(slots.tolist())) == len(slots)
        assert (slots >= 0).all() and (slots < shard_format.n_slots).all()
        assert (np.diff(slots) > 0).all()  # slot order is id order
        np.testing.assert_array_equal(shard_format.ids((shard.shard,), slots), shard.ids)
        if shard.box is not None:  # slot() of local coordinates in the box
            origin = [s.start // 4 for s in shard.box]
            for coords, slot in zip(shard.coords, slots, strict=True):
                local = tuple(int(c - o) for c, o in zip(coords, origin, strict=True))
                assert shard_format.slot(local) == slot
        seen += len(shard.ids)
    assert seen == scale.grid[0] * scale.grid[1] * scale.grid[2]


@settings(max_examples=scaled(40), deadline=None)
@given(grids, st.integers(0, 3), st.integers(0, 3), st.integers(1, 4), st.integers(0, 300))
def test_shards_in_parts_with_padding_read_back(
    grid: tuple[int, ...], preshift: int, minishard: int, n_parts: int, min_part: int
) -> None:
    scale = ScaleGrid(tuple(n * 2 for n in grid), (2, 2, 2))
    spec = _spec("identity", preshift, minishard, 64 - preshift - minishard)
    assert box_bits(scale, spec) is not None
    shard = next(shards_of(scale, spec))
    shard_format = shard_format_of(scale, spec, shard)
    slots, _ = shard_format.slots((shard.shard,), shard.ids)
    payload = {int(s): bytes([int(s) % 251]) * (1 + int(s) % 7) for s in slots}
    runs = np.array_split(slots, n_parts)
    laid = [
        lay_out_part([(int(s), payload[int(s)]) for s in run], min_size=min_part) for run in runs
    ]
    head, tail = encode_stamped(
        shard_format, [m for _, m in laid], shard=(shard.shard,), min_part_size=min_part
    )
    assert len(head) == max(spec.index_nbytes, min_part)
    raw = head + b"".join(bytes(b) for buffers, _ in laid for b in buffers) + tail
    index, _ = read_checked_index(
        shard_format, lambda a, b: raw[a:b], len(raw), "shard", shard=(shard.shard,)
    )
    assert set(np.flatnonzero(index.stored()).tolist()) == set(payload)
    for slot, data in payload.items():
        start, nbytes = (int(v) for v in index.entries[slot])
        assert raw[start : start + nbytes] == data


def test_a_minishard_out_of_id_order_is_refused() -> None:
    shard_format = ScatteredShard(_spec("identity", 0, 0, 0), (4, 1, 1), 0, np.arange(3))
    index = ShardIndex.empty(3)
    for slot, offset in [(0, 20), (1, 16), (2, 24)]:  # id 1 lies before id 0
        index.set(slot, offset, 4)
    with pytest.raises(ShardFormatError, match="increasing id order"):
        shard_format.encode_index(index, shard=(0,), head_nbytes=16, data_nbytes=12)


def test_chunks_of_other_shards_and_overlaps_are_found() -> None:
    scale = ScaleGrid((16, 16, 16), (4, 4, 4))  # 4 x 4 x 4 chunks, ids of 6 bits
    spec = _spec("identity", 1, 2, 3)  # boxes of 2**3 chunks
    boxes = BoxShards(spec, scale.grid, 3)
    raw = b"".join(
        bytes(b) for b in assemble_shard(boxes, [(0, b"aaaa"), (5, b"bbbb")], shard=(2,))
    )
    index, _ = boxes.read_index(lambda a, b: raw[a:b], len(raw), shard=(2,))
    assert np.flatnonzero(index.stored()).tolist() == [0, 5]
    np.testing.assert_array_equal(boxes.ids((2,), np.array([0, 5])), [16, 21])
    with pytest.raises(ShardFormatError, match="not a chunk of this shard"):
        boxes.read_index(lambda a, b: raw[a:b], len(raw), shard=(3,))
    # a chunk listed where its own minishard index lies (raw indexes: [3, 1] uint64)
    raw_spec = PrecomputedSharding(1, 2, 3, "identity", "raw", "raw")
    table = np.zeros((4, 2), dtype="<u8")
    table[0] = (0, 24)  # chunk 16 hashes to minishard 0 of shard 2
    listing = np.array([[16], [0], [24]], dtype="<u8")
    forged = table.tobytes() + listing.tobytes()
    with pytest.raises(ShardFormatError, match="overlaps a minishard index"):
        BoxShards(raw_spec, scale.grid, 3).read_index(
            lambda a, b: forged[a:b], len(forged), shard=(2,)
        )


def test_box_slots_are_the_low_id_bits() -> None:
    scale = ScaleGrid((12, 8, 4), (2, 2, 2))  # grid (6, 4, 2)
    boxes = BoxShards(_spec("identity", 2, 1, 9), scale.grid, 3)
    coords = scale.all_coords()
    ids = morton_ids(coords, scale.grid)
    for c, i in zip(coords, ids, strict=True):
        local = tuple(int(v) % b for v, b in zip(c, boxes.chunks_per_shard, strict=True))
        assert boxes.slot(local) == int(i) & 7
