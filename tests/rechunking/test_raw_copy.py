"""The uncompressed intermediate copy: shardpipe's own chunk writes and reads, zarr's layout."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np
import pytest
import zarr

from shardpipe.rechunking.raw_copy import (
    blocks_of_copy,
    chunk_key,
    copy_store,
    raw_copy_dtype,
    read_region,
    store_blocks,
    stored_raw,
)
from tests.support.spies import CountingStore

SHAPE = (37, 50, 21)  # not a multiple of the chunks: the last ones are padded
CHUNKS = (8, 16, 21)


def _copy(path: Path, dtype: str, fill: Any = 0) -> zarr.Array[Any]:
    return zarr.create_array(
        path, shape=SHAPE, chunks=CHUNKS, dtype=dtype, compressors=None, fill_value=fill
    )


@pytest.mark.parametrize("dtype", ["uint16", ">i4", "float32", "bool", "complex64"])
def test_zarr_reads_what_it_stores_and_it_reads_it_back(tmp_path: Path, dtype: str) -> None:
    data = (np.arange(np.prod(SHAPE)).reshape(SHAPE) % 7).astype(dtype)
    copy = _copy(tmp_path / "copy.zarr", dtype)
    blocks = da.from_array(data, chunks=(16, 32, 21))  # whole chunks, but at the ends
    todo = [(i, j, 0) for i in range(3) for j in range(2)]
    store_blocks(blocks, str(tmp_path / "copy.zarr"), CHUNKS, copy.fill_value, todo)
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "copy.zarr")[...], data)
    read = blocks_of_copy(
        str(tmp_path / "copy.zarr"), SHAPE, np.dtype(dtype), CHUNKS, (37, 16, 21), 0
    )
    assert read.chunks[1] == (16, 16, 16, 2)
    np.testing.assert_array_equal(read.compute(), data)
    assert read.dtype == np.dtype(dtype)


def test_a_chunk_not_stored_reads_as_the_fill_value(tmp_path: Path) -> None:
    _copy(tmp_path / "copy.zarr", "int16", fill=-3)
    store = copy_store(str(tmp_path / "copy.zarr"))
    region = (slice(5, 20), slice(10, 40), slice(0, 21))
    read = read_region(store, region, CHUNKS, np.dtype("int16"), -3)
    assert read.shape == (15, 30, 21) and (read == -3).all()


@pytest.mark.parametrize(("dtype", "straight"), [("uint16", True), (">u2", False)])
def test_whole_chunks_are_read_straight_into_their_place(
    tmp_path: Path, dtype: str, straight: bool
) -> None:
    """A chunk whole in the region, one run of its memory, is read into it (no bytes in
    between); one not stored there reads as the fill value; big endian goes the long way."""
    data = (np.arange(np.prod(SHAPE)).reshape(SHAPE) % 1000).astype(dtype)
    _copy(tmp_path / "copy.zarr", dtype, fill=9)
    todo = [(0, 0, 0), (0, 1, 0), (1, 0, 0)]  # (1, 1, 0) not stored
    store_blocks(da.from_array(data, chunks=CHUNKS), str(tmp_path / "copy.zarr"), CHUNKS, 9, todo)
    store = CountingStore(copy_store(str(tmp_path / "copy.zarr")))
    region = (slice(0, 16), slice(16, 32), slice(0, 21))  # chunks (0, 1, 0) and (1, 1, 0)
    read = read_region(store, region, CHUNKS, np.dtype(dtype), 9)
    expected = data[region].copy()
    expected[8:] = 9
    np.testing.assert_array_equal(read, expected)
    assert store.calls == ["get_into" if straight else "get"] * 2
    store.calls.clear()  # whole chunks, but each a run per plane of the region: the long way
    read = read_region(
        store, (slice(0, 16), slice(0, 20), slice(0, 21)), CHUNKS, np.dtype(dtype), 9
    )
    expected = data[:16, :20].copy()
    expected[8:, 16:] = 9
    np.testing.assert_array_equal(read, expected)
    assert store.calls == ["get"] * 4


@pytest.mark.parametrize("stored", [True, False])
def test_a_copy_of_no_dimensions(tmp_path: Path, stored: bool) -> None:
    zarr.create_array(tmp_path / "copy.zarr", shape=(), dtype="f8", compressors=None, fill_value=2)
    store = copy_store(str(tmp_path / "copy.zarr"))
    if stored:
        store.put(chunk_key(()), [np.array(7.5, "<f8").tobytes()])
    read = read_region(store, (), (), np.dtype("f8"), 2.0)
    assert read.shape == () and read == (7.5 if stored else 2.0)
    assert zarr.open_array(tmp_path / "copy.zarr")[()] == read  # zarr's key for it


def test_only_the_blocks_asked_for_are_stored(tmp_path: Path) -> None:
    data = np.ones(SHAPE, "uint8")
    _copy(tmp_path / "copy.zarr", "uint8")
    store_blocks(
        da.from_array(data, chunks=(8, 16, 21)), str(tmp_path / "copy.zarr"), CHUNKS, 0, [(1, 2, 0)]
    )
    stored = sorted(
        p.relative_to(tmp_path / "copy.zarr" / "c")
        for p in (tmp_path / "copy.zarr" / "c").rglob("*")
        if p.is_file()
    )
    assert [str(p) for p in stored] == [chunk_key((1, 2, 0))[2:]]


@pytest.mark.parametrize("rows", [16, 10])  # the chunk read straight into place, or cut
def test_a_short_chunk_is_an_error_naming_it(tmp_path: Path, rows: int) -> None:
    _copy(tmp_path / "copy.zarr", "uint16")
    store = copy_store(str(tmp_path / "copy.zarr"))
    store.put(chunk_key((0, 0, 0)), [b"\x00" * 10])
    expected = r"copy, in chunks of \(8, 16, 21\): 'c/0/0/0' holds 10 bytes, not the 5376 expected"
    with pytest.raises(ValueError, match=expected):
        read_region(store, (slice(0, 8), slice(0, rows), slice(0, 21)), CHUNKS, np.dtype("u2"), 0)


def test_only_a_copy_of_one_little_endian_bytes_codec_is_stored_raw(tmp_path: Path) -> None:
    assert stored_raw(_copy(tmp_path / "a.zarr", ">i4"))  # zarr stores it little endian
    compressed = zarr.create_array(tmp_path / "b.zarr", shape=SHAPE, chunks=CHUNKS, dtype="u2")
    assert not stored_raw(compressed)  # zstd by default
    assert not stored_raw(_copy(tmp_path / "c.zarr", "U4"))


@pytest.mark.parametrize(
    ("dtype", "raw"),
    [("uint8", True), ("<f8", True), ("U4", False), ("M8[s]", False), ("i2,i2", False)],
)
def test_numbers_and_booleans_only(dtype: str, raw: bool) -> None:
    assert raw_copy_dtype(np.dtype(dtype)) is raw
