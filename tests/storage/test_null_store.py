"""The counting null store (``shardpipe.testing.null_store``).

The storage contract runs against it keeping every key (its logic for kept
objects, parts and pickled copies); the tests below check what it does with
shard keys, which it only counts, and a write into it.
"""

from __future__ import annotations

import gc
import pickle
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np
import pytest
import zarr

import shardpipe
from shardpipe.errors import AbilityNotSupportedError, ConditionFailedError
from shardpipe.storage.base import ShardStore
from shardpipe.storage.resolve import ResolvedStore
from shardpipe.testing.backends import SHARDS, STAGING, ShardStoreTests
from shardpipe.testing.null_store import (
    NullCounts,
    NullShardStore,
    is_metadata_key,
    keep_every_key,
    null_target,
)


class TestNullKeepingEverything(ShardStoreTests):
    def make_store(self, tmp_path: Path, request: pytest.FixtureRequest) -> ShardStore:
        return NullShardStore(keep=keep_every_key)

    def leftovers(self, store: ShardStore) -> list[str]:
        assert isinstance(store, NullShardStore)
        return store.open_uploads()


@pytest.fixture
def store() -> NullShardStore:
    return NullShardStore()


def test_metadata_keys() -> None:
    kept = ["zarr.json", "a/b/zarr.json", "a/.zarray", ".zgroup", "a/.zattrs"]
    kept += ["a/.shardpipe/write.json", ".shardpipe/done/x/0.0", "a/.shardpipe/marker"]
    dropped = ["a/c/0/0/0", "c/1", "a/0.0.0", "a/c/zarr.jsonx", "a/shardpipe/x", "a/c.0.1"]
    assert [k for k in kept + dropped if is_metadata_key(k)] == kept


def test_shards_are_counted_not_kept(store: NullShardStore) -> None:
    assert store.counts == NullCounts()
    store.put("arr/c/0/0", [b"abc", bytearray(b"de"), memoryview(np.zeros(3, "uint16"))])
    assert store.put_streamed("arr/c/0/1", iter([b"x" * 10, b"y" * 5])) == 15
    store.put("arr/zarr.json", [b"{}"])
    assert store.counts == NullCounts(objects=2, nbytes=11 + 15)
    for key in ("arr/c/0/0", "arr/c/0/1"):
        assert (store.get(key), store.size(key), store.version(key)) == (None, None, None)
        with pytest.raises(FileNotFoundError):
            store.get_range(key, 0, 1)
        store.delete(key)  # nothing there: no error
    assert store.get("arr/zarr.json") == b"{}"
    assert list(store.list("arr")) == ["arr/zarr.json"]
    assert "objects=2" in repr(store)


def test_a_failing_producer_counts_nothing(store: NullShardStore) -> None:
    def produce() -> Iterator[bytes]:
        yield b"x" * 100
        raise ValueError("encoding failed")

    with pytest.raises(ValueError, match="encoding failed"):
        store.put_streamed("arr/c/0", produce())
    assert store.counts == NullCounts()


def test_conditions_on_shards_see_nothing_there(store: NullShardStore) -> None:
    store.put("arr/c/0", [b"one"], if_absent=True)
    store.put("arr/c/0", [b"two"], if_absent=True)  # never there: allowed again
    with pytest.raises(ConditionFailedError, match=r"arr/c/0.*not kept"):
        store.put("arr/c/0", [b"three"], if_version="any")
    with pytest.raises(ValueError, match="exclude"):
        store.put("arr/c/0", [b"four"], if_absent=True, if_version="any")
    assert store.counts == NullCounts(objects=2, nbytes=6)
    assert not store.abilities.create_only and not store.abilities.replace_if_unchanged


def test_parts_are_counted_as_one_object(store: NullShardStore) -> None:
    handle = store.begin_parts("arr/c/0/0", STAGING)
    first = store.write_part(handle, 1, [b"b" * 100])
    store.write_part(handle, 0, [b"a" * 10])
    retried = store.write_part(handle, 0, [b"A" * 20, memoryview(b"!")])  # replaces
    assert store.open_uploads() == ["arr/c/0/0"]
    store.finish_parts(handle, [first, retried], b"head", b"tail")
    assert store.counts == NullCounts(objects=1, nbytes=4 + 100 + 21 + 4, parts=3, part_nbytes=131)
    assert store.open_uploads() == []
    assert store.get("arr/c/0/0") is None

    handle = store.begin_parts("arr/c/0/1", STAGING)
    receipt = store.write_part(handle, 0, [b"x"])
    with pytest.raises(ValueError, match="part 1 of 'arr/c/0/1' was not written"):
        store.finish_parts(handle, [receipt, type(receipt)(1, 5)], b"", b"")
    with pytest.raises(ConditionFailedError):
        store.finish_parts(handle, [receipt], b"", b"", if_version="v")
    store.abort_parts(handle)
    store.abort_parts(handle)  # twice is fine
    with pytest.raises(FileNotFoundError, match="no open upload"):
        store.write_part(handle, 0, [b"late"])
    empty = store.begin_parts("arr/c/0/2", STAGING)
    store.finish_parts(empty, [], b"", b"")  # nothing: nothing published
    assert store.counts.objects == 1 and store.counts.aborted == 1


def test_cleanup_aborts_the_uploads_of_one_write(store: NullShardStore) -> None:
    for key in ("arr/c/0", "arr/c/1"):
        store.write_part(store.begin_parts(key, STAGING), 0, [b"x"])
    other = store.begin_parts("arr/c/2", "arr/.shardpipe/staging/another")
    assert store.cleanup(STAGING, SHARDS) == 2
    assert store.open_uploads() == ["arr/c/2"]
    store.abort_parts(other)
    assert store.counts.aborted == 3


def test_refuses_what_needs_the_bytes(store: NullShardStore) -> None:
    abilities = store.abilities
    assert abilities.parts and abilities.streams and not abilities.joins_buffers
    assert not (abilities.copy_range or abilities.write_at or abilities.append)
    handle = store.begin_parts("arr/c/0", STAGING)
    with pytest.raises(AbilityNotSupportedError):
        store.copy_part(handle, 0, "arr/c/1", 0, 1)
    with pytest.raises(AbilityNotSupportedError):
        store.write_at("arr/c/1", 0, [b"x"])
    with pytest.raises(AbilityNotSupportedError):
        store.append("arr/c/1", [b"x"])


def test_counters_are_thread_safe(store: NullShardStore) -> None:
    def work(i: int) -> None:
        for j in range(500):
            if j % 2:
                store.put(f"arr/c/{i}/{j}", [b"x" * j])
            else:
                handle = store.begin_parts(f"arr/c/{i}/{j}", STAGING)
                receipt = store.write_part(handle, 0, [b"y" * j])
                store.finish_parts(handle, [receipt], b"h", b"")

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(work, range(8)))
    odd, even = range(1, 500, 2), range(0, 500, 2)
    expected_bytes = 8 * (sum(odd) + sum(even) + len(even))
    assert store.counts == NullCounts(
        objects=8 * 500, nbytes=expected_bytes, parts=8 * 250, part_nbytes=8 * sum(even)
    )


def test_copies_share_counts_in_one_process_only() -> None:
    store = NullShardStore()
    store.put("arr/zarr.json", [b"{}"])
    copy = pickle.loads(pickle.dumps(store))
    copy.put("arr/c/0", [b"abc"])
    assert store.counts == copy.counts == NullCounts(objects=1, nbytes=3)
    shipped = pickle.dumps(store)
    del store, copy
    gc.collect()
    # as in another process: the metadata travels, the counts start afresh
    elsewhere = pickle.loads(shipped)
    assert elsewhere.counts == NullCounts()
    assert elsewhere.get("arr/zarr.json") == b"{}"


def _source() -> da.Array:
    data = np.random.default_rng(0).integers(0, 50, (64, 64, 96), dtype="uint8")
    data[:, :, 64:] = 0  # one shard of fill value only: not written
    source: da.Array = da.from_array(data, chunks=(32, 32, 32))
    return source


@pytest.mark.parametrize("max_mem", ["300KB", "64MB"], ids=["parts", "whole"])
def test_a_write_publishes_what_a_local_write_does(tmp_path: Path, max_mem: str) -> None:
    layout: dict[str, Any] = {"shards": (64, 64, 32), "chunks": (16, 16, 16), "max_mem": max_mem}
    target = null_target("volume")
    null = target.shards
    assert isinstance(null, NullShardStore)
    report = shardpipe.prepare_write(_source(), target, **layout).execute()
    local = shardpipe.prepare_write(_source(), tmp_path, **layout).execute()
    on_disk = [p.stat().st_size for p in (tmp_path / "c").rglob("*") if p.is_file()]
    assert report.shards_written == local.shards_written == len(on_disk) == 2
    counts = null.counts
    assert (counts.objects, counts.nbytes) == (2, report.nbytes) == (2, sum(on_disk))
    in_parts = max_mem == "300KB"
    assert (counts.parts > 0) == in_parts
    assert counts.aborted == (report.shards_empty if in_parts else 0) == in_parts  # the empty one
    assert null.open_uploads() == []
    # shardpipe sees the metadata zarr wrote: the array reads back as its fill value
    assert target.shards.get("volume/zarr.json") is not None
    opened = zarr.open_array(target.zarr_store, path="volume", mode="r")
    assert opened.shape == (64, 64, 96)
    assert not np.asarray(opened[:4, :4, :4]).any()
    with pytest.raises(shardpipe.ArrayExistsError):
        shardpipe.to_sharded_zarr(_source(), target, **layout)


def test_a_resolved_store_with_its_own_metadata() -> None:
    null = NullShardStore()
    target = ResolvedStore(zarr.storage.MemoryStore(), null, "")
    shardpipe.to_sharded_zarr(_source(), target, shards=(64, 64, 32), chunks=(16, 16, 16))
    assert null.counts.objects == 2
