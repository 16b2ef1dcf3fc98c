"""``EIO`` from the operating system: a ``StorageError`` naming the key, never retried.

A failing disk, a bad sector or a lost network file system make the kernel's
``read``/``write`` calls fail with ``EIO`` (errno 5). Here that error is raised
where the kernel would raise it: in the local backend's file primitives
(:mod:`shardpipe.storage.local.file_io`), for shard files only, while a write
publishes shards and while ``verify`` reads them, and in zarr-python's local
store while a rechunk reads its source. Each must end in a
:class:`~shardpipe.errors.StorageError` (errno kept) naming the shard, after
one try, with nothing half-written published.
"""

from __future__ import annotations

import errno
import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

import shardpipe
from shardpipe.errors import (
    StorageAccessError,
    StorageError,
    StorageFullError,
    TransientStorageError,
)
from shardpipe.storage.local import store as local_store

SHAPE, SHARDS, CHUNKS = (32, 32), (16, 16), (8, 8)


def _shard_file(fd: int) -> str | None:
    """The shard key (``c/i/j``) of the file open at ``fd``, None for any other file."""
    path = os.readlink(f"/proc/self/fd/{fd}")
    folder, _, name = path.rpartition("/c/")
    if not folder or not all(part.isdigit() for part in name.split("/")):
        return None
    return "c/" + name


def _failing(real: Callable[..., Any], tried: Counter[str]) -> Callable[..., Any]:
    """``real``, but with ``EIO`` on shard files (their keys counted in ``tried``)."""

    def call(fd: int, *args: Any) -> Any:
        key = _shard_file(fd)
        if key is None:
            return real(fd, *args)
        tried[key] += 1
        raise OSError(errno.EIO, "Input/output error (injected)")

    return call


def _assert_device_error(err: BaseException, tried: Counter[str]) -> None:
    assert type(err) is StorageError, type(err)  # not full, not access, not transient
    assert not isinstance(err, StorageFullError | StorageAccessError | TransientStorageError)
    assert err.errno == errno.EIO
    assert tried and set(tried.values()) == {1}, tried  # not retried
    assert any(f"'{key}'" in str(err) for key in tried), (str(err), tried)
    assert "errno EIO" in str(err) and "the device failed" in str(err), str(err)


def test_an_io_error_while_writing_a_shard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tried: Counter[str] = Counter()
    temporary: Counter[str] = Counter()

    def temporary_of_shard(fd: int, buffers: Any) -> int:  # shards go to a temporary file first
        path = os.readlink(f"/proc/self/fd/{fd}")
        folder, _, name = path.rpartition("/c/")
        if folder and name.rpartition("/")[2].startswith("."):
            temporary[path] += 1
            tried[path.partition("/c/")[2]] += 1
            raise OSError(errno.EIO, "Input/output error (injected)")
        return real_write_all(fd, buffers)

    real_write_all = local_store.write_all
    monkeypatch.setattr(local_store, "write_all", temporary_of_shard)
    data = np.arange(np.prod(SHAPE), dtype="uint16").reshape(SHAPE)
    with pytest.raises(StorageError) as caught:
        shardpipe.to_sharded_zarr(data, str(tmp_path / "a.zarr"), shards=SHARDS, chunks=CHUNKS)
    err = caught.value
    assert type(err) is StorageError and err.errno == errno.EIO, repr(err)
    assert set(temporary.values()) == {1}, temporary  # each shard tried once, not retried
    assert "errno EIO" in str(err) and "the device failed" in str(err), str(err)
    assert "'c/" in str(err), str(err)  # names the shard
    monkeypatch.undo()
    assert not list((tmp_path / "a.zarr").glob("c/**/.*"))  # no temporary file left
    report = shardpipe.verify(str(tmp_path / "a.zarr"))
    assert report.ok and report.shards_present == 0, report  # nothing half-written


@pytest.mark.parametrize("read", ["whole", "in ranges"])
def test_an_io_error_while_verify_reads_a_shard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, read: str
) -> None:
    """A shard read whole (its size, then that many bytes) or in ranges: ``read_at`` both."""
    data = np.arange(np.prod(SHAPE), dtype="uint16").reshape(SHAPE)
    shardpipe.to_sharded_zarr(data, str(tmp_path / "a.zarr"), shards=SHARDS, chunks=CHUNKS)
    tried: Counter[str] = Counter()
    monkeypatch.setattr(local_store, "read_at", _failing(local_store.read_at, tried))
    if read == "in ranges":  # shards are read whole up to a size: make them read in ranges
        monkeypatch.setattr("shardpipe.stored.shard_integrity.WHOLE_READ_LIMIT", 0)
    with pytest.raises(StorageError) as caught:
        shardpipe.verify(str(tmp_path / "a.zarr"))
    _assert_device_error(caught.value, tried)


def test_an_io_error_while_a_shard_is_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``get`` (one read to the end of the file, ``read_all``) reports the device's error."""
    from shardpipe.storage.resolve import resolve_store

    data = np.arange(np.prod(SHAPE), dtype="uint16").reshape(SHAPE)
    shardpipe.to_sharded_zarr(data, str(tmp_path / "a.zarr"), shards=SHARDS, chunks=CHUNKS)
    store = resolve_store(str(tmp_path / "a.zarr")).shards
    tried: Counter[str] = Counter()
    monkeypatch.setattr(local_store, "read_all", _failing(local_store.read_all, tried))
    with pytest.raises(StorageError) as caught:
        store.get(next(store.list("c/")))
    _assert_device_error(caught.value, tried)


@pytest.mark.parametrize("sharded", [True, False], ids=["sharded", "unsharded"])
def test_an_io_error_while_a_rechunk_reads_its_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sharded: bool
) -> None:
    """The source is read through zarr-python, from the zarr store of a local path
    (:mod:`shardpipe.storage.local.contained`), whose reads are ``read_at`` too."""
    from shardpipe.storage.local import contained

    data = np.arange(np.prod(SHAPE), dtype="uint16").reshape(SHAPE)
    source = tmp_path / "source.zarr"
    if sharded:
        shardpipe.to_sharded_zarr(data, str(source), shards=SHARDS, chunks=CHUNKS)
    else:
        zarr.create_array(str(source), shape=SHAPE, chunks=SHARDS, dtype=data.dtype)[...] = data
    tried: Counter[str] = Counter()
    monkeypatch.setattr(contained, "read_at", _failing(contained.read_at, tried))
    with pytest.raises(StorageError) as caught:
        shardpipe.rechunk(
            str(source), str(tmp_path / "target.zarr"), shards=(32, 32), chunks=(16, 16)
        )
    _assert_device_error(caught.value, tried)


@pytest.mark.parametrize("reading", ["async", "sync"])
def test_an_io_error_while_zarr_reads_a_local_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reading: str
) -> None:
    """Any read of zarr-python through the store of a local path, not only a rechunk's."""
    from shardpipe.internals.zarr_core import default_buffer_prototype
    from shardpipe.storage.local import contained

    data = np.arange(np.prod(SHAPE), dtype="uint16").reshape(SHAPE)
    shardpipe.to_sharded_zarr(data, str(tmp_path), shards=SHARDS, chunks=CHUNKS)
    store = contained.contained(str(tmp_path))
    tried: Counter[str] = Counter()
    monkeypatch.setattr(contained, "read_at", _failing(contained.read_at, tried))
    with pytest.raises(StorageError) as caught:
        if reading == "async":
            zarr.open_array(store, mode="r")[...]
        else:
            store.get_sync("c/1/0", prototype=default_buffer_prototype())
    _assert_device_error(caught.value, tried)


def test_an_io_error_while_a_rechunk_reads_part_of_a_source_shard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Shards the array's edge cuts are read in ranges (the index, then the inner chunks'
    ranges, concurrently): the error is the StorageError, not a group of them."""
    from shardpipe.storage.local import contained

    data = np.arange(8 * 32, dtype="uint16").reshape(8, 32)  # half of each shard's rows
    source = tmp_path / "source.zarr"
    shardpipe.to_sharded_zarr(data, str(source), shards=SHARDS, chunks=CHUNKS)
    tried: Counter[tuple[str, int]] = Counter()
    real_read_at = contained.read_at

    def chunk_ranges_fail(fd: int, start: int, stop: int) -> bytes:
        key = _shard_file(fd)
        if key is None or stop == os.fstat(fd).st_size:  # the index, at the end
            return real_read_at(fd, start, stop)
        tried[key, start] += 1
        raise OSError(errno.EIO, "Input/output error (injected)")

    monkeypatch.setattr(contained, "read_at", chunk_ranges_fail)
    with pytest.raises(StorageError) as caught:
        shardpipe.rechunk(str(source), str(tmp_path / "target.zarr"), shards=(8, 32), chunks=(8, 8))
    err = caught.value
    assert type(err) is StorageError and err.errno == errno.EIO, repr(err)
    assert tried and set(tried.values()) == {1}, tried  # each range read once: not retried
    assert any(f"'{key}'" in str(err) for key, _ in tried), (str(err), tried)
