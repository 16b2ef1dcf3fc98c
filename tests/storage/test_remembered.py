"""Remembered documents and listings: a second read answered from the first; a change forgets."""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from pathlib import Path

from shardpipe.storage.base import StoreAbilities
from shardpipe.storage.local.store import LocalShardStore
from shardpipe.storage.remembered import RememberedDocuments, RememberedListing, listing_once
from shardpipe.storage.resolve import resolve_store
from tests.support.spies import CountingStore


def _stores(tmp_path: Path) -> tuple[CountingStore, RememberedDocuments]:
    counting = CountingStore(LocalShardStore(tmp_path, fsync=False))
    counting.put("a/zarr.json", [b'{"node_type": "array"}'])
    counting.put("a/c/0", [b"shard"])
    counting.calls.clear()
    return counting, RememberedDocuments(counting)


def test_a_node_document_is_read_once_and_a_shard_each_time(tmp_path: Path) -> None:
    counting, remembered = _stores(tmp_path)
    for _ in range(3):
        assert remembered.get("a/zarr.json") == b'{"node_type": "array"}'
        assert remembered.size("a/zarr.json") == 22
        assert remembered.get_within("a/zarr.json", 100) == (22, b'{"node_type": "array"}')
        assert remembered.get("a/c/0") == b"shard"
        assert remembered.get("a/.zarray") is None  # an absent one too
    assert counting.calls.count("get") == 1 + 3 + 1  # zarr.json once, the shard 3 times, .zarray
    assert counting.calls.count("size") == 1 and counting.calls.count("get_within") == 1


def test_a_change_forgets_what_was_read(tmp_path: Path) -> None:
    _, remembered = _stores(tmp_path)
    assert remembered.get("a/zarr.json") == b'{"node_type": "array"}'
    remembered.put("a/zarr.json", [b"{}"])
    assert remembered.get("a/zarr.json") == b"{}"


def _listed(tmp_path: Path) -> tuple[CountingStore, RememberedListing]:
    counting = CountingStore(LocalShardStore(tmp_path, fsync=False))
    for key in ("a/.shardpipe/job.json", "a/c/0", "a/c/1", "a/zarr.json", "ab/zarr.json"):
        counting.put(key, [b"x"])
    counting.calls.clear()
    return counting, RememberedListing(counting, "a/")


def test_the_keys_under_the_root_are_listed_once(tmp_path: Path) -> None:
    counting, remembered = _listed(tmp_path)
    assert list(remembered.list("a/.shardpipe/undo/")) == []
    assert list(remembered.list("a/")) == ["a/.shardpipe/job.json", "a/c/0", "a/c/1", "a/zarr.json"]
    assert list(remembered.list("a/c/")) == ["a/c/0", "a/c/1"]
    assert list(remembered.list("a/c/1")) == ["a/c/1"]
    assert counting.calls.count("list") == 1
    assert list(remembered.list("ab/")) == ["ab/zarr.json"]  # outside the root: listed as it is
    assert counting.calls.count("list") == 2


def test_a_change_forgets_the_listing(tmp_path: Path) -> None:
    counting, remembered = _listed(tmp_path)
    assert list(remembered.list("a/c/")) == ["a/c/0", "a/c/1"]
    remembered.put("a/c/2", [b"x"])
    assert list(remembered.list("a/c/")) == ["a/c/0", "a/c/1", "a/c/2"]
    remembered.delete_many(["a/c/0", "a/c/1"])
    assert list(remembered.list("a/c/")) == ["a/c/2"]
    assert list(remembered.list("a/")) == ["a/.shardpipe/job.json", "a/c/2", "a/zarr.json"]
    assert counting.calls.count("list") == 4  # after a change, each listing is the store's


def test_a_change_before_the_first_listing_keeps_it_to_come(tmp_path: Path) -> None:
    counting, remembered = _listed(tmp_path)
    remembered.put("a/.shardpipe/job.json", [b"y"])  # a job's marker, then its listings
    assert list(remembered.list("a/.shardpipe/undo/")) == []
    assert list(remembered.list("a/")) == ["a/.shardpipe/job.json", "a/c/0", "a/c/1", "a/zarr.json"]
    assert counting.calls.count("list") == 1


def test_a_local_disk_and_a_transaction_are_listed_as_they_are(tmp_path: Path) -> None:
    import icechunk

    local = resolve_store(tmp_path / "x.zarr", None, None)
    assert listing_once(local) is local  # its recovery removes temporaries: a change at once
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "r")))
    session = resolve_store(repo.writable_session("main").store, "x", None)
    assert session.transactional and listing_once(session) is session
    s3_like = replace(local, shards=_NoTemporaries(tmp_path))
    assert isinstance(listing_once(s3_like).shards, RememberedListing)


class _NoTemporaries(LocalShardStore):
    """A local backend that says it leaves no temporary files (as an object store)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, fsync=False)

    @property
    def abilities(self) -> StoreAbilities:
        return dataclasses.replace(super().abilities, leaves_temporaries=False)


def test_a_job_record_is_read_once_and_a_record_in_its_folders_each_time(tmp_path: Path) -> None:
    counting, remembered = _stores(tmp_path)
    counting.put("a/.shardpipe/write.json", [b'{"state": "complete"}'])
    counting.put("a/.shardpipe/undo/0.json", [b"{}"])
    counting.calls.clear()
    for _ in range(3):
        assert remembered.get("a/.shardpipe/write.json") == b'{"state": "complete"}'
        assert remembered.get("a/.shardpipe/undo/0.json") == b"{}"
    assert counting.calls.count("get") == 1 + 3
