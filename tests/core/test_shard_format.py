"""Tests of the ``sharding_indexed`` byte format in ``shardpipe.core.shard_format``."""

from __future__ import annotations

import struct

import crc32c
import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

from shardpipe.core.grid import ShardLayout, chunks_in_array
from shardpipe.core.shard_format import (
    EMPTY,
    ShardFormatError,
    ShardIndex,
    assemble_shard,
    index_nbytes,
    lay_out_part,
    shard_index_range,
    stamp_index,
)

SETTINGS = settings(max_examples=75, deadline=None)
NONE = 2**64 - 1  # offset and nbytes of an empty slot


def reference_crc32c(data: bytes) -> int:
    """Bitwise CRC-32C (Castagnoli, reflected polynomial 0x82F63B78)."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


# A 4x4 uint8 shard of 2x2 inner chunks (4 slots). Chunks are handed over in the order
# slot 3, slot 0; slots 1 and 2 are empty.
CHUNK0 = bytes([1, 2, 3, 4])
CHUNK3 = bytes([9, 10, 11, 12])
ENCODED = [(3, CHUNK3), (0, CHUNK0)]
INDEX_END = struct.pack("<8Q", 4, 4, NONE, NONE, NONE, NONE, 0, 4)
INDEX_START = struct.pack("<8Q", 72, 4, NONE, NONE, NONE, NONE, 68, 4)
CRC_END = 0x2349E408
CRC_START = 0xA60376C8
GOLDEN = {
    "end": CHUNK3 + CHUNK0 + INDEX_END + struct.pack("<I", CRC_END),
    "start": INDEX_START + struct.pack("<I", CRC_START) + CHUNK3 + CHUNK0,
}
EXPECTED_ARRAY = np.array(
    [[1, 2, 0, 0], [3, 4, 0, 0], [0, 0, 9, 10], [0, 0, 11, 12]], dtype=np.uint8
)


def test_reference_crc32c_check_value() -> None:
    assert reference_crc32c(b"123456789") == 0xE3069283 == crc32c.crc32c(b"123456789")


@pytest.mark.parametrize(("body", "crc"), [(INDEX_END, CRC_END), (INDEX_START, CRC_START)])
def test_golden_crc_constants(body: bytes, crc: int) -> None:
    assert crc32c.crc32c(body) == crc
    assert reference_crc32c(body) == crc


@pytest.mark.parametrize("location", ["end", "start"])
def test_assemble_shard_golden_bytes(location: str) -> None:
    shard = b"".join(bytes(b) for b in assemble_shard(ENCODED, 4, location))
    assert len(shard) == 8 + 68
    assert shard == GOLDEN[location]


@pytest.mark.parametrize("location", ["end", "start"])
def test_golden_index_decodes(location: str) -> None:
    start, stop = shard_index_range(len(GOLDEN[location]), 4, location)
    index = ShardIndex.decode(GOLDEN[location][start:stop], 4)
    offset = 68 if location == "start" else 0
    assert index.entries.dtype == np.uint64
    assert index.entries.tolist() == [[offset + 4, 4], [NONE, NONE], [NONE, NONE], [offset, 4]]
    assert index.stored().tolist() == [True, False, False, True]


def write_zarr_shards(shards: dict[str, bytes], shape, shard_shape, chunk_shape, location):
    store = zarr.storage.MemoryStore()
    array = zarr.create_array(
        store,
        shape=shape,
        chunks=chunk_shape,
        shards={"shape": shard_shape, "index_location": location},
        dtype="uint8",
        compressors=None,
        fill_value=0,
    )
    buffer = default_buffer_prototype().buffer
    for key, data in shards.items():
        sync(store.set(key, buffer.from_bytes(data)))
    return array


@pytest.mark.parametrize("location", ["end", "start"])
def test_zarr_reads_golden_shard(location: str) -> None:
    array = write_zarr_shards({"c/0/0": GOLDEN[location]}, (4, 4), (4, 4), (2, 2), location)
    np.testing.assert_array_equal(array[...], EXPECTED_ARRAY)


@pytest.mark.parametrize("location", ["end", "start"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_zarr_reads_assembled_edge_shards(location: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    layout = ShardLayout((7, 5), (4, 4), (2, 2))
    padded = np.zeros((8, 8), dtype=np.uint8)
    shards = {}
    for shard in layout.shard_coords():
        encoded = []
        for local in rng.permutation(list(chunks_in_array(layout, shard).chunks())):
            if rng.random() < 0.25:
                continue  # leave the slot empty: reads as the fill value
            values = rng.integers(1, 256, size=(2, 2), dtype=np.uint8)
            (r0, r1), (c0, c1) = layout.chunk_box(shard, tuple(local))
            padded[r0:r1, c0:c1] = values
            encoded.append((layout.chunk_slot(tuple(local)), values.tobytes()))
        parts = assemble_shard(encoded, layout.n_chunks_per_shard, location)
        shards["c/" + "/".join(map(str, shard))] = b"".join(bytes(p) for p in parts)
    array = write_zarr_shards(shards, (7, 5), (4, 4), (2, 2), location)
    np.testing.assert_array_equal(array[...], padded[:7, :5])


@st.composite
def indexes(draw: st.DrawFn) -> ShardIndex:
    n_slots = draw(st.integers(0, 20))
    values = st.one_of(st.just(NONE), st.integers(0, 2**64 - 1))
    flat = draw(st.lists(values, min_size=2 * n_slots, max_size=2 * n_slots))
    return ShardIndex(np.array(flat, dtype=np.uint64).reshape(n_slots, 2))


@given(indexes())
@SETTINGS
def test_index_encode_decode_round_trip(index: ShardIndex) -> None:
    data = index.encode()
    assert len(data) == index_nbytes(index.n_slots) == 16 * index.n_slots + 4
    assert data[-4:] == struct.pack("<I", reference_crc32c(data[:-4]))
    assert data[:-4] == struct.pack(f"<{2 * index.n_slots}Q", *index.entries.ravel().tolist())
    back = ShardIndex.decode(data, index.n_slots)
    np.testing.assert_array_equal(back.entries, index.entries)
    no_crc = ShardIndex.decode(data[:-4], index.n_slots, checksum=False)
    np.testing.assert_array_equal(no_crc.entries, index.entries)


@given(indexes(), st.data())
@SETTINGS
def test_index_decode_detects_corruption(index: ShardIndex, data: st.DataObject) -> None:
    encoded = bytearray(index.encode())
    position = data.draw(st.integers(0, len(encoded) - 1))
    encoded[position] ^= 1 << data.draw(st.integers(0, 7))
    with pytest.raises(ShardFormatError, match="CRC32C"):
        ShardIndex.decode(bytes(encoded), index.n_slots)


@pytest.mark.parametrize("delta", [-5, -1, 1, 16])
def test_index_decode_rejects_wrong_length(delta: int) -> None:
    data = ShardIndex.empty(3).encode()
    wrong = data + bytes(delta) if delta > 0 else data[:delta]
    with pytest.raises(ShardFormatError, match="bytes"):
        ShardIndex.decode(wrong, 3)


def test_empty_index_is_all_ones() -> None:
    index = ShardIndex.empty(3)
    assert EMPTY == NONE
    assert index.entries.tolist() == [[NONE, NONE]] * 3
    assert not index.stored().any()
    assert index.encode()[:48] == b"\xff" * 48
    index.set(1, 0, 0)
    assert index.stored().tolist() == [False, True, False]


@pytest.mark.parametrize(
    ("nbytes", "location", "expected"),
    [(100, "end", (32, 100)), (100, "start", (0, 68)), (68, "end", (0, 68))],
)
def test_shard_index_range_table(nbytes: int, location: str, expected: tuple) -> None:
    assert shard_index_range(nbytes, 4, location) == expected


def test_shard_index_range_rejects_short_shard() -> None:
    with pytest.raises(ShardFormatError, match="too short"):
        shard_index_range(67, 4, "end")


def test_empty_part_is_not_padded() -> None:
    buffers, manifest = lay_out_part([], min_size=10)
    assert buffers == []
    assert manifest.size == 0


@st.composite
def shard_parts(draw: st.DrawFn):
    """Slots split over parts, a payload per slot, a min_size per part."""
    n_slots = draw(st.integers(1, 12))
    stored = draw(st.lists(st.integers(0, n_slots - 1), unique=True, max_size=n_slots))
    cuts = sorted(draw(st.lists(st.integers(0, len(stored)), max_size=4)))
    groups = [stored[a:b] for a, b in zip([0, *cuts], [*cuts, len(stored)], strict=True)]
    payloads = {s: draw(st.binary(max_size=9)) for s in stored}
    min_sizes = [draw(st.integers(0, 40)) for _ in groups]
    return n_slots, groups, payloads, min_sizes


@given(shard_parts(), st.sampled_from(["start", "end"]))
@SETTINGS
def test_stamp_index_locates_every_chunk(case, location: str) -> None:
    n_slots, groups, payloads, min_sizes = case
    blobs, manifests = [], []
    for group, min_size in zip(groups, min_sizes, strict=True):
        buffers, manifest = lay_out_part([(s, payloads[s]) for s in group], min_size=min_size)
        blob = b"".join(bytes(b) for b in buffers)
        data = sum(len(payloads[s]) for s in group)
        assert len(blob) == manifest.size == (max(data, min_size) if data else 0)
        assert manifest.data_nbytes == data
        assert blob[data:] == bytes(len(blob) - data)
        blobs.append(blob)
        manifests.append(manifest)
    head = index_nbytes(n_slots) if location == "start" else 0
    index = stamp_index(n_slots, manifests, first_offset=head)
    body = b"".join(blobs)
    shard = index.encode() + body if location == "start" else body + index.encode()
    start, stop = shard_index_range(len(shard), n_slots, location)
    decoded = ShardIndex.decode(shard[start:stop], n_slots)
    np.testing.assert_array_equal(decoded.entries, index.entries)
    for slot in range(n_slots):
        offset, nbytes = (int(v) for v in decoded.entries[slot])
        if slot in payloads:
            assert shard[offset : offset + nbytes] == payloads[slot]
            assert offset >= stop if location == "start" else offset + nbytes <= start
        else:
            assert (offset, nbytes) == (NONE, NONE)
