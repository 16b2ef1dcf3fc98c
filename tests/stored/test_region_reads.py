"""``RegionReader``: regions of unsharded arrays read by shardpipe equal zarr-python's reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import pytest
import zarr
from zarr.codecs import numcodecs as wrapped

import shardpipe
from shardpipe.errors import ChunkDecodeError
from shardpipe.stored.bounded_reads import bounded_array
from shardpipe.stored.locations import source_locations
from shardpipe.stored.region_reads import READS_IN_FLIGHT, region_reader

SHAPE = (37, 50, 21)
REGIONS = [
    (slice(0, 37), slice(0, 50), slice(0, 21)),
    (slice(3, 30), slice(17, 49), slice(0, 21)),  # cuts chunks on every side
    (slice(36, 37), slice(0, 1), slice(20, 21)),
]


def _data(dtype: str) -> np.ndarray:
    return (np.arange(np.prod(SHAPE)).reshape(SHAPE) % 251).astype(dtype)


def _assert_reads_as_zarr(path: Path) -> None:
    plain = zarr.open_array(str(path), mode="r")
    reader = region_reader(bounded_array(plain))
    assert reader is not None
    for region in REGIONS:
        np.testing.assert_array_equal(reader.read(region), np.asarray(plain[region]))
    blocks = reader.blocks((16, 20, 21))
    assert blocks.chunks[0] == (16, 16, 5)
    np.testing.assert_array_equal(blocks.compute(), np.asarray(plain[...]))


@pytest.mark.parametrize(
    ("dtype", "order", "compressor", "fill_value"),
    [
        ("<u2", "C", numcodecs.Zstd(1), 0),
        (">u2", "F", numcodecs.Zlib(1), None),
        ("<f8", "C", numcodecs.LZ4(), np.nan),
        ("|b1", "C", None, False),
    ],
)
def test_v2_arrays(
    tmp_path: Path, dtype: str, order: str, compressor: Any, fill_value: Any
) -> None:
    array = zarr.open_array(
        str(tmp_path),
        mode="w",
        shape=SHAPE,
        chunks=(8, 16, 7),
        dtype=dtype,
        zarr_format=2,
        compressor=compressor,
        order=order,
        fill_value=fill_value,
    )
    array[:20] = _data(dtype)[:20]  # the chunks past row 24 are not stored: the fill value
    _assert_reads_as_zarr(tmp_path)


@pytest.mark.parametrize("compressors", ["auto", None, wrapped.BZ2(level=1)])
def test_v3_arrays(tmp_path: Path, compressors: Any) -> None:
    array = zarr.create_array(
        str(tmp_path), shape=SHAPE, chunks=(8, 16, 7), dtype=">i4", compressors=compressors
    )
    array[:20] = _data("int32")[:20]
    _assert_reads_as_zarr(tmp_path)


def test_more_chunks_than_are_fetched_at_once(tmp_path: Path) -> None:
    n = 4 * READS_IN_FLIGHT + 3
    array = zarr.create_array(str(tmp_path), shape=(n,), chunks=(1,), dtype="u1")
    array[...] = np.arange(n) % 256
    reader = region_reader(bounded_array(zarr.open_array(str(tmp_path), mode="r")))
    assert reader is not None
    np.testing.assert_array_equal(reader.read((slice(1, n - 1),)), np.arange(1, n - 1) % 256)


def _count_batches(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of chunks of each batch a ``RegionReader`` fetches from now on."""
    from shardpipe.stored import region_reads

    batches: list[int] = []
    sync = region_reads.sync

    def counted(fetch: Any) -> Any:
        fetched = sync(fetch)
        batches.append(len(fetched))
        return fetched

    monkeypatch.setattr(region_reads, "sync", counted)
    return batches


def _wrapped(path: Path) -> zarr.storage.LoggingStore[Any]:
    """A local store that zarr's event loop reads (a wrapper: not read in the calling thread)."""
    return zarr.storage.LoggingStore(zarr.storage.LocalStore(str(path)), log_level="DEBUG")


def test_a_batch_fetches_at_most_its_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks of 64 KiB under a 256 KiB cap: 3 fetched at once, decoded, then 3 more..."""
    from shardpipe.stored import region_reads

    monkeypatch.setattr(region_reads, "BYTES_IN_FLIGHT", 256 * 1024)
    array = zarr.create_array(
        str(tmp_path), shape=(20, 256, 256), chunks=(1, 256, 256), dtype="u1", compressors=None
    )
    data = (np.arange(20 * 256 * 256) % 251).astype("u1").reshape(20, 256, 256)
    array[...] = data
    reader = region_reader(bounded_array(zarr.open_array(_wrapped(tmp_path), mode="r")))
    assert reader is not None
    batches = _count_batches(monkeypatch)
    np.testing.assert_array_equal(
        reader.read((slice(1, 19), slice(0, 256), slice(0, 256))), data[1:19]
    )
    assert batches == [3, 3, 3, 3, 3, 3]  # a chunk is read as its bound and one byte


def test_a_store_with_round_trips_gets_more_in_flight(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a store that is not a local disk or memory, a batch may hold more bytes."""
    from shardpipe.stored import region_reads

    monkeypatch.setattr(region_reads, "BYTES_IN_FLIGHT", 128 * 1024)
    monkeypatch.setattr(region_reads, "REMOTE_BYTES_IN_FLIGHT", 320 * 1024)
    monkeypatch.setattr(region_reads, "_near", lambda store: False)  # as an object store
    store = zarr.storage.LoggingStore(zarr.storage.MemoryStore(), log_level="DEBUG")
    array = zarr.create_array(store, shape=(12, 256, 256), chunks=(1, 256, 256), dtype="u1")
    data = (np.arange(12 * 256 * 256) % 251).astype("u1").reshape(12, 256, 256)
    array[...] = data
    reader = region_reader(bounded_array(array))
    assert reader is not None
    batches = _count_batches(monkeypatch)
    np.testing.assert_array_equal(reader.read((slice(0, 12), slice(0, 256), slice(0, 256))), data)
    assert batches == [4, 4, 4]  # 1 chunk a batch under the local cap


def test_a_chunk_larger_than_the_cap_is_fetched_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from shardpipe.stored import region_reads

    monkeypatch.setattr(region_reads, "BYTES_IN_FLIGHT", 1024)
    array = zarr.create_array(str(tmp_path), shape=(3, 64, 64), chunks=(1, 64, 64), dtype="u2")
    data = np.arange(3 * 64 * 64, dtype="u2").reshape(3, 64, 64)
    array[...] = data
    reader = region_reader(bounded_array(zarr.open_array(_wrapped(tmp_path), mode="r")))
    assert reader is not None
    batches = _count_batches(monkeypatch)
    np.testing.assert_array_equal(reader.read((slice(0, 3), slice(0, 64), slice(0, 64))), data)
    assert batches == [1, 1, 1]


@pytest.mark.parametrize("where", ["local", "memory"])
def test_a_local_disk_or_memory_is_read_in_the_calling_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """One chunk at a time, no hop to zarr's event loop, and the region's whole chunks
    decoded into their places (zstd, blosc, none), the cut ones copied."""
    import threading

    from shardpipe.codec.chunk_codec import ChunkCodec
    from shardpipe.stored import region_reads

    def no_event_loop(fetch: Any) -> Any:
        fetch.close()
        raise AssertionError("fetched on zarr's event loop")

    monkeypatch.setattr(region_reads, "sync", no_event_loop)
    into: list[bool] = []
    decode_into = ChunkCodec.decode_into

    def counted(self: ChunkCodec, data: Any, target: np.ndarray) -> bool:
        assert threading.current_thread() is threading.main_thread()
        into.append(decode_into(self, data, target))
        return into[-1]

    monkeypatch.setattr(ChunkCodec, "decode_into", counted)
    store = str(tmp_path) if where == "local" else zarr.storage.MemoryStore()
    data = _data("<u2")[:12, :16, :7]
    for compressors in (numcodecs.Zstd(1), numcodecs.Blosc(), None):
        array = zarr.create_array(
            store,
            shape=data.shape,
            chunks=(2, 16, 7),  # whole planes: contiguous in a region of whole planes
            dtype="<u2",
            zarr_format=2,
            overwrite=True,
            compressors=compressors,
        )
        array[:10] = data[:10]  # the last chunk not stored: the fill value
        reader = region_reader(bounded_array(zarr.open_array(store, mode="r")))
        assert reader is not None
        into.clear()
        np.testing.assert_array_equal(
            reader.read((slice(1, 12), slice(0, 16), slice(0, 7))), np.asarray(array[1:12])
        )
        assert into == [True] * 4, compressors  # chunks 1 to 4; 0 cut, 5 not stored
        into.clear()
        got = reader.read((slice(0, 8), slice(3, 16), slice(0, 7)))
        np.testing.assert_array_equal(got, data[0:8, 3:16])
        assert into == [], into  # every chunk cut: decoded, then copied


def test_which_stores_are_near(tmp_path: Path) -> None:
    """A local disk or memory, wrapped or through fsspec, answers without a round trip."""
    import fsspec

    from shardpipe.stored.region_reads import _near

    local = zarr.storage.LocalStore(str(tmp_path))
    assert _near(local) and _near(zarr.storage.MemoryStore())
    assert _near(zarr.storage.LoggingStore(local))
    assert _near(zarr.storage.FsspecStore.from_url(f"file://{tmp_path}"))
    s3 = fsspec.filesystem("s3", anon=True, asynchronous=True)
    assert not _near(zarr.storage.FsspecStore(s3, path="bucket/array"))


def test_sharded_and_inexpressible_arrays_are_left_to_zarr(tmp_path: Path) -> None:
    shardpipe.to_sharded_zarr(
        _data("u2"), str(tmp_path / "s.zarr"), shards=(16, 32, 21), chunks=(8, 16, 7)
    )
    assert region_reader(bounded_array(zarr.open_array(str(tmp_path / "s.zarr")))) is None
    strings = zarr.create_array(str(tmp_path / "t.zarr"), shape=(4,), chunks=(2,), dtype=str)
    assert region_reader(bounded_array(strings)) is None


def test_a_chunk_that_does_not_decode_is_named(tmp_path: Path) -> None:
    array = zarr.open_array(
        str(tmp_path),
        mode="w",
        shape=SHAPE,
        chunks=(8, 16, 7),
        dtype="<u2",
        zarr_format=2,
        compressor=numcodecs.Zstd(1),
    )
    array[...] = _data("<u2")
    (tmp_path / "1.0.2").write_bytes(b"not zstd")
    reader = region_reader(bounded_array(zarr.open_array(str(tmp_path), mode="r")))
    assert reader is not None
    with pytest.raises(ChunkDecodeError, match=r"1\.0\.2"):
        reader.read((slice(8, 16), slice(0, 16), slice(14, 21)))
    np.testing.assert_array_equal(
        reader.read((slice(0, 8), slice(0, 16), slice(0, 7))), _data("<u2")[:8, :16, :7]
    )


def test_the_checks_of_what_a_graph_reads_find_the_array(tmp_path: Path) -> None:
    """A target over the source is refused as for ``da.from_zarr`` (stored.locations)."""
    zarr.create_array(str(tmp_path / "a.zarr"), shape=SHAPE, chunks=(8, 16, 7), dtype="u2")
    reader = region_reader(bounded_array(zarr.open_array(str(tmp_path / "a.zarr"))))
    assert reader is not None
    found = source_locations(reader.blocks((16, 20, 21)))
    assert [location.path.strip("/") for location in found] == [str(tmp_path / "a.zarr").strip("/")]


def _small(path: Path, compressors: Any = None) -> None:
    """A (4, 8) uint16 Zarr v2 array of two chunks of whole rows at ``path``."""
    array = zarr.create_array(
        str(path), shape=(4, 8), chunks=(2, 8), dtype="<u2", zarr_format=2, compressors=compressors
    )
    array[...] = np.arange(32, dtype="<u2").reshape(4, 8)


def _local_stores(path: Path) -> list[Any]:
    """zarr's ``LocalStore`` and shardpipe's contained one, both read in the calling thread."""
    from shardpipe.storage.local.contained import ContainedLocalStore

    return [zarr.storage.LocalStore(str(path), read_only=True), ContainedLocalStore(str(path))]


def _read_all(store: Any) -> np.ndarray:
    return _reader(store).read((slice(0, 4), slice(0, 8)))


def _reader(store: Any) -> Any:
    reader = region_reader(bounded_array(zarr.open_array(store, mode="r")))
    assert reader is not None
    return reader


@pytest.mark.parametrize("compressors", [None, numcodecs.Zstd(1), numcodecs.Blosc()])
def test_read_here_a_chunk_larger_than_its_codecs_allow_is_refused(
    tmp_path: Path, compressors: Any
) -> None:
    _small(tmp_path, compressors)
    with open(tmp_path / "1.0", "ab") as file:
        file.write(bytes(100_000))
    for store in _local_stores(tmp_path):
        with pytest.raises(ChunkDecodeError, match=r"1\.0: holds more than"):
            _read_all(store)


def test_read_here_keeps_the_checks_of_keys_and_maps_device_faults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chunk that is a link leading out is refused; EIO is shardpipe's StorageError
    naming the key; a folder at a chunk's key reads as the fill value."""
    import errno
    import os

    import zarr.storage._local as zarr_local

    from shardpipe.errors import StorageError, UnsafeKeyError
    from shardpipe.storage.local import contained

    root = tmp_path / "a"
    _small(root)
    (tmp_path / "outside").write_bytes((root / "1.0").read_bytes())
    os.remove(root / "1.0")
    os.symlink(tmp_path / "outside", root / "1.0")
    with pytest.raises(UnsafeKeyError):
        _read_all(_local_stores(root)[1])
    os.remove(root / "1.0")
    os.mkdir(root / "1.0")
    for store in _local_stores(root):
        got = _read_all(store)
        assert not got[2:].any() and np.array_equal(got[:2], np.arange(16).reshape(2, 8))

    def device_fault(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.EIO, "Input/output error")

    readers = [_reader(store) for store in _local_stores(root)]  # metadata read first
    monkeypatch.setattr(zarr_local, "_get", device_fault)
    monkeypatch.setattr(contained, "read_at", device_fault)
    for reader in readers:
        with pytest.raises(StorageError, match=r"reading '0\.0'") as raised:
            reader.read((slice(0, 4), slice(0, 8)))
        assert raised.value.errno == errno.EIO


def test_a_memory_store_s_bytes_are_not_shared_with_what_is_read() -> None:
    store = zarr.storage.MemoryStore()
    array = zarr.create_array(store, shape=(4, 8), chunks=(2, 8), dtype="<u2", compressors=None)
    array[...] = 7
    got = _read_all(store)
    got[...] = 1
    assert (np.asarray(array[...]) == 7).all() and (_read_all(store) == 7).all()
