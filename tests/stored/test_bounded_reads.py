"""``bounded_array``: the same values as zarr-python reads, read and decoded within bounds.

Every layout a rechunk may read (sharded and unsharded Zarr v3, Zarr v2 in C
and F order, with filters, big endian, without a fill value, chunks left
out) reads back equal to zarr-python's own reading, whole and in boxes that
cut shards and chunks, also after pickling; what it refuses (a forged index
range, a shard object or a chunk larger than its codecs can make) is a
``ChunkDecodeError`` naming the key.
"""

from __future__ import annotations

import pickle
import threading
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import pytest
import zarr
from zarr.codecs import numcodecs as wrapped

import shardpipe
from shardpipe.errors import ChunkDecodeError
from shardpipe.formats.base import assemble_shard
from shardpipe.storage.resolve import resolve_store
from shardpipe.stored.bounded_reads import BoundedChunks, BoundedSharding, bounded_array
from shardpipe.stored.metadata import format_of, open_array_metadata

SHAPE = (37, 50, 21)  # cut by every chunk and shard shape below
BOXES = [
    (slice(None),) * 3,
    (slice(3, 30), slice(17, 49), slice(0, 21)),  # parts of shards: zarr reads the index first
    (slice(36, 37), slice(0, 1), slice(20, 21)),
    (slice(0, 37, 5), slice(None), slice(2, 3)),
]


def _data(dtype: str = "uint16") -> np.ndarray:
    return np.arange(np.prod(SHAPE), dtype="uint32").reshape(SHAPE).astype(dtype)


def _assert_same_reads(path: Path, kind: type | None) -> zarr.Array[Any]:
    """Read ``path`` plainly and bounded (``kind``: its one codec; None: left as it is)."""
    plain = zarr.open_array(str(path), mode="r")
    bounded = bounded_array(plain)
    if kind is None:
        assert bounded is plain
        return bounded
    assert [type(c) for c in bounded.metadata.codecs] == [kind]
    assert (bounded.store_path.store, bounded.path) == (plain.store_path.store, plain.path)
    again = pickle.loads(pickle.dumps(bounded))
    for box in BOXES:
        expected = np.asarray(plain[box])
        np.testing.assert_array_equal(np.asarray(bounded[box]), expected)
        np.testing.assert_array_equal(np.asarray(again[box]), expected)
    rows = np.array([0, 5, 36])
    np.testing.assert_array_equal(
        np.asarray(bounded.get_orthogonal_selection((rows, slice(None), slice(4, 9)))),
        np.asarray(plain.get_orthogonal_selection((rows, slice(None), slice(4, 9)))),
    )
    return bounded


@pytest.mark.parametrize(
    "compressors",
    [
        "auto",
        None,
        zarr.codecs.GzipCodec(),
        zarr.codecs.BloscCodec(),
        wrapped.BZ2(level=1),
        wrapped.LZMA(),
        wrapped.LZ4(),
        wrapped.Zstd(),
        wrapped.Zlib(),
    ],
    ids=lambda c: str(c)[:20],
)
@pytest.mark.parametrize("index_location", ["end", "start"])
def test_sharded_arrays_read_as_zarr_reads_them(
    tmp_path: Path, compressors: Any, index_location: str
) -> None:
    data = _data()
    data[:16, :16] = 0  # whole inner chunks of the fill value: left out
    shardpipe.to_sharded_zarr(
        data,
        str(tmp_path),
        shards=(16, 32, 21),
        chunks=(8, 16, 7),
        compressors=compressors,
        index_location=index_location,
    )
    _assert_same_reads(tmp_path, BoundedSharding)


@pytest.mark.parametrize("compressors", ["auto", wrapped.BZ2(level=1), wrapped.LZ4()])
def test_unsharded_v3_arrays_read_as_zarr_reads_them(tmp_path: Path, compressors: Any) -> None:
    array = zarr.create_array(
        str(tmp_path), shape=SHAPE, chunks=(8, 16, 7), dtype=">i4", compressors=compressors
    )
    array[:20] = _data("int32")[:20]  # the chunks past row 24 are left out
    _assert_same_reads(tmp_path, BoundedChunks)


@pytest.mark.parametrize(
    ("dtype", "order", "compressor", "filters", "fill_value"),
    [
        ("<u2", "C", numcodecs.Zlib(1), None, 0),
        (">u2", "F", numcodecs.BZ2(1), None, None),
        ("<f8", "C", numcodecs.LZMA(), None, np.nan),
        ("<i4", "C", numcodecs.Blosc(shuffle=-1), [numcodecs.Delta(dtype="<i4")], 7),
        ("|u1", "F", None, None, 3),
    ],
)
def test_v2_arrays_read_as_zarr_reads_them(
    tmp_path: Path, dtype: str, order: str, compressor: Any, filters: Any, fill_value: Any
) -> None:
    array = zarr.open_array(
        str(tmp_path),
        mode="w",
        shape=SHAPE,
        chunks=(8, 16, 7),
        dtype=dtype,
        zarr_format=2,
        compressor=compressor,
        filters=filters,
        order=order,
        fill_value=fill_value,
    )
    array[:20] = _data(dtype)[:20]
    _assert_same_reads(tmp_path, BoundedChunks)


def test_what_it_cannot_express_is_left_to_zarr(tmp_path: Path) -> None:
    strings = zarr.create_array(str(tmp_path / "s"), shape=(4,), chunks=(2,), dtype=str)
    strings[...] = np.array(["a", "bb", "", "dddd"])
    _assert_same_reads(tmp_path / "s", None)
    v2 = zarr.open_array(
        str(tmp_path / "v2"),
        mode="w",
        shape=(4,),
        chunks=(2,),
        dtype="<f8",
        zarr_format=2,
        filters=[numcodecs.Base64()],  # no Zarr v3 codec: zarr cannot convert the metadata
    )
    v2[...] = [0.5, 1.25, 2.0, 3.0]
    _assert_same_reads(tmp_path / "v2", None)


def _one_shard(path: Path) -> tuple[bytes, Any]:
    """A (64, 64) uint8 array in one shard of (32, 32) chunks; the shard's bytes and format."""
    data = np.arange(64 * 64, dtype="uint32").reshape(64, 64).astype("uint8")
    shardpipe.to_sharded_zarr(data, str(path), shards=(64, 64), chunks=(32, 32))
    return (path / "c" / "0" / "0").read_bytes(), format_of(
        open_array_metadata(resolve_store(str(path)))
    )


def test_an_index_range_longer_than_an_inner_chunk_is_refused_before_it_is_read(
    tmp_path: Path,
) -> None:
    raw, fmt = _one_shard(tmp_path)
    index, _ = fmt.read_index(lambda a, b: raw[a:b], len(raw), shard=(0, 0))
    chunks = [raw[int(a) : int(a) + int(n)] for a, n in index.entries.tolist()]
    body = b"".join(chunks) + bytes(4 << 20)  # 4 MiB after the chunks, and an index over it
    entries = np.array([[0, len(body)]] * 4, dtype="<u8")
    shard = b"".join(bytes(b) for b in assemble_shard(fmt, [], shard=(0, 0)))
    (tmp_path / "c" / "0" / "0").write_bytes(body + _index_bytes(fmt, entries, shard))
    bounded = bounded_array(zarr.open_array(str(tmp_path), mode="r"))
    with pytest.raises(ChunkDecodeError, match=r"^c/0/0: bytes 0-4,1.* asked for an inner chunk"):
        bounded[:10, :10]  # a part of the shard: the ranges its index gives
    with pytest.raises(ChunkDecodeError, match=r"^c/0/0: the shard holds more than the "):
        bounded[...]  # the whole shard: read whole, at most what it can hold


def _index_bytes(fmt: Any, entries: np.ndarray, empty_shard: bytes) -> bytes:
    """The encoded index of ``entries`` (offsets, lengths), as the format stores it."""
    import crc32c

    body = entries.tobytes()
    assert len(empty_shard) == len(body) + 4  # an index of 4 entries and its CRC32C
    return body + crc32c.crc32c(body).to_bytes(4, "little")


def test_a_chunk_object_larger_than_its_codecs_can_make(tmp_path: Path) -> None:
    array = zarr.create_array(
        str(tmp_path), shape=(64,), chunks=(16,), dtype="u1", compressors=None
    )
    array[...] = np.arange(64, dtype="u1")
    (tmp_path / "c" / "1").write_bytes(bytes(1 << 20))
    bounded = bounded_array(zarr.open_array(str(tmp_path), mode="r"))
    np.testing.assert_array_equal(np.asarray(bounded[:16]), np.arange(16))
    with pytest.raises(ChunkDecodeError, match=r"^c/1: holds more than the 16 bytes its codecs"):
        bounded[16:32]


@pytest.mark.parametrize("sharded", [False, True])
def test_chunks_are_decoded_off_zarrs_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sharded: bool
) -> None:
    """zarr-python runs one event loop for every thread of a process: a chunk decoded on
    it waits for every other, so Dask's threads would decode one chunk at a time."""
    shards = (16, 32, 21) if sharded else None
    array = zarr.create_array(
        tmp_path / "a.zarr", shape=SHAPE, chunks=(8, 16, 21), shards=shards, dtype="uint16"
    )
    array[...] = _data()
    threads: set[str] = set()
    decode = BoundedChunks.decode_chunk

    def watched(self: BoundedChunks, *args: Any) -> np.ndarray:
        threads.add(threading.current_thread().name)
        return decode(self, *args)

    monkeypatch.setattr(BoundedChunks, "decode_chunk", watched)
    bounded = bounded_array(zarr.open_array(tmp_path / "a.zarr", mode="r"))
    np.testing.assert_array_equal(np.asarray(bounded[...]), _data())
    np.testing.assert_array_equal(np.asarray(bounded[3:30, 17:49]), _data()[3:30, 17:49])
    assert threads and "zarr_io" not in threads
