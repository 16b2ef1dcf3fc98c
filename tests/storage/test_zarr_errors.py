"""zarr's own writes through ``StorageErrorsStore``: permanent faults become shardpipe's errors."""

from __future__ import annotations

import errno
import pickle
from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.storage import LocalStore, MemoryStore

from shardpipe.errors import StorageAccessError, StorageFullError
from shardpipe.internals.zarr_core import Buffer, sync
from shardpipe.storage.resolve import resolve_store
from shardpipe.storage.zarr_errors import StorageErrorsStore, with_storage_errors


class FailingStore(MemoryStore):
    """A memory store whose writes of keys ending with ``failing`` raise ``error``."""

    def __init__(self, failing: str, error: OSError) -> None:
        super().__init__()
        self.failing = failing
        self.error = error

    async def set(self, key: str, value: Buffer) -> None:
        if key.endswith(self.failing):
            raise self.error
        await super().set(key, value)

    async def set_if_not_exists(self, key: str, value: Buffer) -> None:
        if key.endswith(self.failing):
            raise self.error
        await super().set_if_not_exists(key, value)

    async def delete(self, key: str) -> None:
        if key.endswith(self.failing):
            raise self.error
        await super().delete(key)


def test_a_full_disk_in_zarrs_metadata_write_is_storage_full_naming_the_key() -> None:
    inner = FailingStore("a/zarr.json", OSError(errno.ENOSPC, "No space left on device"))
    with pytest.raises(StorageFullError, match=r"^writing 'g/a/zarr.json': No space left"):
        zarr.create_array(with_storage_errors(inner), name="g/a", shape=(4,), dtype="u1")
    with pytest.raises(OSError) as raw:  # what zarr raises on its own
        zarr.create_array(inner, name="g/a", shape=(4,), dtype="u1")
    assert not isinstance(raw.value, StorageFullError)


@pytest.mark.parametrize("number", [errno.EACCES, errno.EROFS, errno.EPERM])
def test_a_refused_write_is_storage_access(number: int) -> None:
    inner = FailingStore("zarr.json", OSError(number, "refused"))
    group = zarr.open_group(MemoryStore(), mode="w")  # metadata written without faults
    with pytest.raises(StorageAccessError, match=r"^writing 'zarr.json': refused"):
        zarr.open_group(with_storage_errors(inner), mode="w").attrs.put({"a": 1})
    assert group.attrs.asdict() == {}


def test_deletes_are_explained_and_other_faults_pass_through() -> None:
    full = StorageErrorsStore(FailingStore("k", OSError(errno.EDQUOT, "Disk quota exceeded")))
    with pytest.raises(StorageFullError, match=r"^deleting 'k': Disk quota exceeded"):
        sync(full.delete("k"))
    other = StorageErrorsStore(FailingStore("k", OSError(errno.EBUSY, "Device or resource busy")))
    zarr.open_group(other, mode="w").attrs.put({"a": 1})  # not k: written
    with pytest.raises(OSError) as caught:
        sync(other.delete("k"))
    assert type(caught.value) is OSError and caught.value.errno == errno.EBUSY
    assert zarr.open_group(other, mode="a").attrs.asdict() == {"a": 1}  # reads go through


def test_local_writes_through_the_resolved_store(tmp_path: Path) -> None:
    target = resolve_store(str(tmp_path / "x.zarr"))
    store = target.zarr_store_for_writes
    assert isinstance(store, StorageErrorsStore)
    assert str(store) == str(target.zarr_store)
    assert with_storage_errors(store) is store  # never wrapped twice
    array = zarr.create_array(store, name="a", shape=(3,), dtype="i2", fill_value=7)
    array[...] = np.arange(3)
    copy = pickle.loads(pickle.dumps(store))  # tasks carry it to workers
    assert zarr.open_array(copy, path="a", mode="r")[...].tolist() == [0, 1, 2]
    assert isinstance(
        resolve_store(LocalStore(str(tmp_path))).zarr_store_for_writes, StorageErrorsStore
    )


def test_an_icechunk_store_is_left_as_it_is(tmp_path: Path) -> None:
    icechunk = pytest.importorskip("icechunk")
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path)))
    session = repo.writable_session("main")
    target = resolve_store(session)
    assert target.zarr_store_for_writes is target.zarr_store
