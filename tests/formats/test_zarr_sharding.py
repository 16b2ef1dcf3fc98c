"""Tests of the ``sharding_indexed`` byte format in ``shardpipe.formats.zarr_sharding``."""

from __future__ import annotations

import struct
from typing import Any

import crc32c
import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st

from shardpipe.core.grid import ShardLayout, chunks_in_array
from shardpipe.formats.base import (
    EMPTY,
    ShardFormat,
    ShardIndex,
    assemble_shard,
    back_to_back,
    exact_total,
    lay_out_part,
    stamp_index,
)
from shardpipe.formats.zarr_sharding import (
    ShardFormatError,
    ZarrShardingFormat,
    decode_index,
    encode_index,
    index_nbytes,
)
from shardpipe.internals.zarr_core import default_buffer_prototype, sync
from tests.support.examples import scaled


def shard_index_range(nbytes: int, n_slots: int, location: str) -> tuple[int, int]:
    return ZarrShardingFormat((n_slots,), location).index_range(nbytes)  # type: ignore[arg-type]


SETTINGS = settings(max_examples=scaled(75), deadline=None)
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
    shard = b"".join(
        bytes(b) for b in assemble_shard(ZarrShardingFormat((4,), location), ENCODED, shard=(0,))
    )
    assert len(shard) == 8 + 68
    assert shard == GOLDEN[location]


@pytest.mark.parametrize("location", ["end", "start"])
def test_golden_index_decodes(location: str) -> None:
    start, stop = shard_index_range(len(GOLDEN[location]), 4, location)
    index = decode_index(GOLDEN[location][start:stop], 4)
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
    shard_format = ZarrShardingFormat(layout.chunks_per_shard, location)  # type: ignore[arg-type]
    shards = {}
    for shard in layout.shard_coords():
        encoded = []
        for local in rng.permutation(list(chunks_in_array(layout, shard).chunks())):
            if rng.random() < 0.25:
                continue  # leave the slot empty: reads as the fill value
            values = rng.integers(1, 256, size=(2, 2), dtype=np.uint8)
            (r0, r1), (c0, c1) = layout.chunk_box(shard, tuple(local))
            padded[r0:r1, c0:c1] = values
            encoded.append((shard_format.slot(tuple(local)), values.tobytes()))
        parts = assemble_shard(shard_format, encoded, shard=(0,))
        shards[shard_format.key(shard)] = b"".join(bytes(p) for p in parts)
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
    data = encode_index(index)
    assert len(data) == index_nbytes(index.n_slots) == 16 * index.n_slots + 4
    assert data[-4:] == struct.pack("<I", reference_crc32c(data[:-4]))
    assert data[:-4] == struct.pack(f"<{2 * index.n_slots}Q", *index.entries.ravel().tolist())
    back = decode_index(data, index.n_slots)
    np.testing.assert_array_equal(back.entries, index.entries)
    no_crc = decode_index(data[:-4], index.n_slots, checksum=False)
    np.testing.assert_array_equal(no_crc.entries, index.entries)


@given(indexes(), st.data())
@SETTINGS
def test_index_decode_detects_corruption(index: ShardIndex, data: st.DataObject) -> None:
    encoded = bytearray(encode_index(index))
    position = data.draw(st.integers(0, len(encoded) - 1))
    encoded[position] ^= 1 << data.draw(st.integers(0, 7))
    with pytest.raises(ShardFormatError, match="CRC32C"):
        decode_index(bytes(encoded), index.n_slots)


@pytest.mark.parametrize("delta", [-5, -1, 1, 16])
def test_index_decode_rejects_wrong_length(delta: int) -> None:
    data = encode_index(ShardIndex.empty(3))
    wrong = data + bytes(delta) if delta > 0 else data[:delta]
    with pytest.raises(ShardFormatError, match="bytes"):
        decode_index(wrong, 3)


def test_empty_index_is_all_ones() -> None:
    index = ShardIndex.empty(3)
    assert EMPTY == NONE
    assert index.entries.tolist() == [[NONE, NONE]] * 3
    assert not index.stored().any()
    assert encode_index(index)[:48] == b"\xff" * 48
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
    index = stamp_index(n_slots, manifests, [head + s for s in back_to_back(manifests)])
    body = b"".join(blobs)
    shard = encode_index(index) + body if location == "start" else body + encode_index(index)
    start, stop = shard_index_range(len(shard), n_slots, location)
    decoded = decode_index(shard[start:stop], n_slots)
    np.testing.assert_array_equal(decoded.entries, index.entries)
    for slot in range(n_slots):
        offset, nbytes = (int(v) for v in decoded.entries[slot])
        if slot in payloads:
            assert shard[offset : offset + nbytes] == payloads[slot]
            assert offset >= stop if location == "start" else offset + nbytes <= start
        else:
            assert (offset, nbytes) == (NONE, NONE)


def test_zarr_format_follows_the_protocol_and_names_keys() -> None:
    default = ZarrShardingFormat((2, 3), "start")
    assert isinstance(default, ShardFormat)
    assert default.key((1, 2)) == "c/1/2"
    assert ZarrShardingFormat((2,), key_separator=".").key((4,)) == "c.4"
    assert ZarrShardingFormat((2, 2), key_prefix=None, key_separator=".").key((0, 7)) == "0.7"
    # the head is the index padded to the store's smallest part; at the end there is none
    assert default.head_nbytes() == index_nbytes(6) == 100
    assert default.head_nbytes(5 << 20) == 5 << 20
    assert ZarrShardingFormat((2, 3), "end").head_nbytes(5 << 20) == 0
    assert ZarrShardingFormat((2, 3), "end").has_tail and not default.has_tail


def test_zarr_format_index_from_metadata_matches_zarr() -> None:
    from shardpipe.stored.metadata import format_of

    array = zarr.create_array(
        zarr.storage.MemoryStore(),
        shape=(10, 10),
        chunks=(2, 5),
        shards={"shape": (4, 10), "index_location": "start"},
        dtype="uint8",
    )
    shard_format = format_of(array.metadata)
    assert shard_format == ZarrShardingFormat((2, 2), "start", checksum=True)
    assert shard_format.key((2, 0)) == array.metadata.encode_chunk_key((2, 0))


KEY_NAMINGS = [
    {"key_prefix": "c", "key_separator": "/"},
    {"key_prefix": "c", "key_separator": "."},
    {"key_prefix": None, "key_separator": "."},
    {"key_prefix": None, "key_separator": "/"},
]


@given(
    st.sampled_from(KEY_NAMINGS),
    st.lists(st.integers(1, 2**62), min_size=0, max_size=5),
    st.data(),
)
@SETTINGS
def test_coords_reads_every_key_back(
    naming: dict[str, Any], grid: list[int], data: st.DataObject
) -> None:
    shard_format = ZarrShardingFormat((1,) * len(grid), **naming)
    shard = tuple(data.draw(st.integers(0, n - 1)) for n in grid)
    key = shard_format.key(shard)
    assert shard_format.coords(key, tuple(grid)) == shard
    assert shard_format.coords(key) == shard
    if grid:  # one past the end of a dimension names no shard of the grid
        past = (*shard[:-1], grid[-1])
        assert shard_format.coords(shard_format.key(past), tuple(grid)) is None


@pytest.mark.parametrize(
    "key",
    [
        "c/1",  # too few components
        "c/1/2/3",  # too many
        "c/01/2",  # leading zero: zarr would name it c/1/2
        "c/+1/2",
        "c/-1/2",
        "c/1 /2",
        "c/1/",
        "c//2",
        "c/\u0661/2",  # a digit, but not an ASCII one
        "c/1e3/2",
        "c.1.2",  # another separator
        "d/1/2",  # another prefix
        "1/2",
        "c/" + "9" * 20 + "/0",  # past any extent
        "c/1/2.shardpipe-tmp",
        "c/1/.2.abc.shardpipe-tmp",
        "c/1/2/",
    ],
)
def test_coords_refuses_keys_that_name_no_shard(key: str) -> None:
    assert ZarrShardingFormat((2, 2)).coords(key) is None


def test_coords_of_a_zero_dimensional_array() -> None:
    assert ZarrShardingFormat(()).coords("c") == ()
    assert ZarrShardingFormat((), key_prefix=None).coords("0") == ()
    assert ZarrShardingFormat(()).coords("c/0") is None


def test_coords_agrees_with_zarr_on_every_chunk_key_encoding() -> None:
    from shardpipe.internals.zarr_core import ArrayV3Metadata
    from shardpipe.stored.metadata import format_of

    for encoding in [
        {"name": "default", "separator": "/"},
        {"name": "default", "separator": "."},
        {"name": "v2", "separator": "."},
        {"name": "v2", "separator": "/"},
    ]:
        array = zarr.create_array(
            zarr.storage.MemoryStore(),
            shape=(10, 30),
            chunks=(2, 5),
            shards=(4, 10),
            dtype="uint8",
            chunk_key_encoding=encoding,  # type: ignore[arg-type]
        )
        assert isinstance(array.metadata, ArrayV3Metadata)
        shard_format = format_of(array.metadata)
        for shard in [(0, 0), (2, 1), (1, 2)]:
            key = array.metadata.encode_chunk_key(shard)
            assert shard_format.coords(key, (3, 3)) == shard, (encoding, key)


@given(st.lists(st.integers(0, 2**64 - 1), max_size=64))
def test_exact_total_is_the_sum_in_python_integers(values: list[int]) -> None:
    # a uint64 sum wraps past 2**64 (forged index lengths): the total must not (issue 39)
    assert exact_total(np.array(values, dtype=np.uint64)) == sum(values)
