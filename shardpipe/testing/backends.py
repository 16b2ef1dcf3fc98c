"""The contract every shardpipe storage backend keeps, as an inheritable pytest suite.

Subclass :class:`ShardStoreTests` in a test module and implement
:meth:`~ShardStoreTests.make_store` (and, for backends that write parts,
:meth:`~ShardStoreTests.leftovers`); pytest collects every test method::

    from shardpipe.testing.backends import ShardStoreTests

    class TestMyStore(ShardStoreTests):
        def make_store(self, tmp_path, request):
            return MyShardStore(tmp_path / "root")

        def leftovers(self, store):
            return sorted(...)  # staging files or open uploads of unfinished writes

Tests of an ability the backend declares absent (``store.abilities``) check
that the method refuses with ``AbilityNotSupportedError`` (or
``PartsNotSupportedError``), then skip with that reason. Needs the ``test``
extra (pytest).
"""

from __future__ import annotations

import pickle
import random
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from shardpipe.errors import (
    AbilityNotSupportedError,
    ConditionFailedError,
    PartsNotSupportedError,
)
from shardpipe.storage.base import PartReceipt, PartsHandle, ShardStore

MiB = 2**20
STAGING = "arr/.shardpipe-staging/run1"
SHARDS = "arr/c"


def _data(n: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(n)


def _split(data: bytes) -> list[Any]:
    """Hand bytes over as several buffers of different types."""
    half = len(data) // 2
    return [memoryview(data)[:half], bytearray(data[half:])]


class ShardStoreTests:
    """The contract tests; subclass and implement ``make_store``."""

    def make_store(self, tmp_path: Path, request: pytest.FixtureRequest) -> ShardStore:
        """Return a fresh, empty store (a hook for subclasses)."""
        raise NotImplementedError

    def leftovers(self, store: ShardStore) -> list[str]:
        """Staging files, temporary files or open uploads of unfinished writes, sorted."""
        raise NotImplementedError

    @pytest.fixture
    def store(self, tmp_path: Path, request: pytest.FixtureRequest) -> ShardStore:
        """A fresh store for each test."""
        return self.make_store(tmp_path, request)

    @staticmethod
    def part_size(store: ShardStore) -> int:
        """Size of a part that is allowed anywhere in an object."""
        return max(store.min_part_size, 64 * 1024)

    @staticmethod
    def require_parts(store: ShardStore) -> None:
        """Skip unless the store writes parts, after checking that it refuses them."""
        if not store.abilities.parts:
            with pytest.raises(PartsNotSupportedError):
                store.begin_parts("arr/c/0", STAGING)
            handle = PartsHandle("arr/c/0", "upload-id", STAGING)
            with pytest.raises(PartsNotSupportedError):
                store.write_part(handle, 0, [b"x"])
            with pytest.raises(PartsNotSupportedError):
                store.finish_parts(handle, [PartReceipt(0, 1)], b"", b"")
            with pytest.raises(PartsNotSupportedError):
                store.abort_parts(handle)
            pytest.skip(f"{type(store).__name__} declares no parts (and refuses them)")

    # -- whole objects -------------------------------------------------------
    def test_put_get_size_delete(self, store: ShardStore) -> None:
        assert store.get("arr/c/0/0") is None
        assert store.size("arr/c/0/0") is None
        store.put("arr/c/0/0", [b"abc", bytearray(b"def"), memoryview(b"gh")])
        assert store.get("arr/c/0/0") == b"abcdefgh"
        assert store.size("arr/c/0/0") == 8
        store.put("arr/c/0/0", [b""])
        assert store.get("arr/c/0/0") == b""
        assert store.size("arr/c/0/0") == 0
        store.delete("arr/c/0/0")
        assert store.get("arr/c/0/0") is None
        assert store.size("arr/c/0/0") is None
        store.delete("arr/c/0/0")  # absent: no error

    def test_get_range(self, store: ShardStore) -> None:
        data = _data(100_000, seed=1)
        store.put("arr/c/1", [data])
        for start, stop in [(0, 10), (10, 20_000), (99_990, 100_000), (0, 100_000), (5, 5)]:
            assert store.get_range("arr/c/1", start, stop) == data[start:stop]
        with pytest.raises(FileNotFoundError):
            store.get_range("arr/c/absent", 0, 4)

    def test_list(self, store: ShardStore) -> None:
        keys = ["arr/c/0/0", "arr/c/0/1", "arr/c/1/0", "arr/zarr.json", "other/c/0"]
        for key in keys:
            store.put(key, [key.encode()])
        assert sorted(store.list("arr/c")) == keys[:3]
        assert sorted(store.list("arr")) == keys[:4]
        assert sorted(store.list("")) == keys
        assert list(store.list("missing")) == []

    def test_put_replaces_atomically(self, store: ShardStore) -> None:
        """Readers racing a writer see the old object or the new one, never a mix."""
        old, new = b"a" * MiB, b"b" * (MiB + MiB // 2)
        store.put("arr/c/0", [old])
        stop = threading.Event()

        def write() -> None:
            try:
                for i in range(30):
                    store.put("arr/c/0", [new if i % 2 == 0 else old])
            finally:
                stop.set()

        def read() -> int:
            reads = 0
            while not stop.is_set() or reads == 0:
                assert store.get("arr/c/0") in (old, new)
                reads += 1
            return reads

        with ThreadPoolExecutor(3) as pool:
            readers = [pool.submit(read) for _ in range(2)]
            pool.submit(write).result()
            assert all(r.result() > 0 for r in readers)

    # -- versions and conditional publishes ------------------------------------
    def test_version_changes_with_every_put(self, store: ShardStore) -> None:
        assert store.version("arr/c/v") is None
        seen = set()
        for i in range(3):
            store.put("arr/c/v", [f"content {i}".encode()])
            version = store.version("arr/c/v")
            assert version is not None and version not in seen
            assert store.version("arr/c/v") == version  # stable while unchanged
            seen.add(version)
        store.delete("arr/c/v")
        assert store.version("arr/c/v") is None

    def test_create_only_put(self, store: ShardStore) -> None:
        store.put("arr/c/x", [b"first"], if_absent=True)
        assert store.get("arr/c/x") == b"first"
        with pytest.raises(ConditionFailedError, match="arr/c/x"):
            store.put("arr/c/x", [b"second"], if_absent=True)
        assert store.get("arr/c/x") == b"first"
        assert self._no_temporaries(store)

    def test_replace_if_unchanged_put(self, store: ShardStore) -> None:
        store.put("arr/c/y", [b"one"])
        read = store.version("arr/c/y")
        assert read is not None
        store.put("arr/c/y", [b"two"], if_version=read)
        assert store.get("arr/c/y") == b"two"
        with pytest.raises(ConditionFailedError):  # stale: the object changed since
            store.put("arr/c/y", [b"three"], if_version=read)
        assert store.get("arr/c/y") == b"two"
        with pytest.raises(ConditionFailedError):
            store.put("arr/c/absent", [b"x"], if_version=read)
        assert store.get("arr/c/absent") is None
        assert self._no_temporaries(store)

    def _no_temporaries(self, store: ShardStore) -> bool:
        return not [k for k in store.list("arr") if "tmp" in k.rsplit("/", 1)[-1]]

    # -- in-place updates ------------------------------------------------------
    def test_write_at(self, store: ShardStore) -> None:
        if not store.abilities.write_at:
            store.put("arr/c/w", [b"abc"])
            with pytest.raises(AbilityNotSupportedError):
                store.write_at("arr/c/w", 0, [b"x"])
            pytest.skip(f"{type(store).__name__} declares no write_at (and refuses it)")
        store.put("arr/c/w", [b"0123456789"])
        store.write_at("arr/c/w", 3, [b"ab", memoryview(b"c")])
        assert store.get("arr/c/w") == b"012abc6789"
        store.write_at("arr/c/w", 8, [b"XYZ"])  # may grow the object
        assert store.get("arr/c/w") == b"012abc67XYZ"
        with pytest.raises(ValueError, match="offset"):
            store.write_at("arr/c/w", 12, [b"!"])
        with pytest.raises(FileNotFoundError):
            store.write_at("arr/c/absent", 0, [b"!"])

    def test_append(self, store: ShardStore) -> None:
        if not store.abilities.append:
            store.put("arr/c/a", [b"abc"])
            with pytest.raises(AbilityNotSupportedError):
                store.append("arr/c/a", [b"x"])
            pytest.skip(f"{type(store).__name__} declares no append (and refuses it)")
        store.put("arr/c/a", [b"head"])
        before = store.version("arr/c/a")
        assert store.append("arr/c/a", [b"-one", bytearray(b"-two")]) == 12
        assert store.get("arr/c/a") == b"head-one-two"
        assert store.version("arr/c/a") != before
        with pytest.raises(FileNotFoundError):
            store.append("arr/c/absent", [b"!"])

    # -- parts -----------------------------------------------------------------
    @pytest.mark.parametrize("index_location", ["start", "end"])
    def test_parts_out_of_order_from_threads(self, store: ShardStore, index_location: str) -> None:
        self.require_parts(store)
        size = self.part_size(store)
        index = _data(100, seed=99)
        # with the index at the end the tail is last: on S3 every part then needs 5 MiB
        sizes = [size, size, size if index_location == "end" else 1000]
        parts = [_data(n, seed=i) for i, n in enumerate(sizes)]
        head_nbytes = max(len(index), store.min_part_size)
        head = index.ljust(head_nbytes, b"\0") if index_location == "start" else b""
        tail = index if index_location == "end" else b""
        handle = store.begin_parts("arr/c/0/0", STAGING)
        assert store.get("arr/c/0/0") is None
        with ThreadPoolExecutor(3) as pool:
            futures = [
                pool.submit(store.write_part, handle, i, _split(parts[i])) for i in (2, 0, 1)
            ]
            receipts = [f.result() for f in futures]
        assert sorted((r.number, r.size) for r in receipts) == list(enumerate(sizes))
        assert store.get("arr/c/0/0") is None  # nothing visible before finish_parts
        store.finish_parts(handle, receipts, head, tail)
        expected = head + b"".join(parts) + tail
        assert store.size("arr/c/0/0") == len(expected)
        assert store.get("arr/c/0/0") == expected
        assert self.leftovers(store) == []

    def test_retried_write_part_replaces(self, store: ShardStore) -> None:
        self.require_parts(store)
        size = self.part_size(store)
        handle = store.begin_parts("arr/c/1/0", STAGING)
        first = store.write_part(handle, 0, [_data(size, seed=1)])
        last = store.write_part(handle, 1, [b"last part"])
        retried = store.write_part(handle, 0, [_data(size, seed=2)])
        assert first.size == retried.size == size
        store.finish_parts(handle, [last, retried], b"", b"")
        assert store.get("arr/c/1/0") == _data(size, seed=2) + b"last part"

    def test_conditional_finish_parts(self, store: ShardStore) -> None:
        self.require_parts(store)
        store.put("arr/c/2/2", [b"published by someone else"])
        stale = store.version("arr/c/2/2")
        handle = store.begin_parts("arr/c/2/2", STAGING)
        receipt = store.write_part(handle, 0, [b"mine"])
        with pytest.raises(ConditionFailedError):
            store.finish_parts(handle, [receipt], b"", b"", if_absent=True)
        assert store.get("arr/c/2/2") == b"published by someone else"
        store.put("arr/c/2/2", [b"changed again"])
        with pytest.raises(ConditionFailedError):
            store.finish_parts(handle, [receipt], b"", b"", if_version=stale)
        assert store.get("arr/c/2/2") == b"changed again"
        current = store.version("arr/c/2/2")
        store.finish_parts(handle, [receipt], b"", b"", if_version=current)
        assert store.get("arr/c/2/2") == b"mine"
        assert self.leftovers(store) == []

    def test_copy_part_composes_from_the_old_object(self, store: ShardStore) -> None:
        self.require_parts(store)
        if not store.abilities.copy_range:
            handle = store.begin_parts("arr/c/3/3", STAGING)
            with pytest.raises(AbilityNotSupportedError):
                store.copy_part(handle, 0, "arr/c/3/3", 0, 1)
            store.abort_parts(handle)
            pytest.skip(f"{type(store).__name__} declares no copy_range (and refuses it)")
        size = self.part_size(store)
        old = _data(size + 500, seed=5)
        store.put("arr/c/3/3", [old])
        before = store.version("arr/c/3/3")
        # an append-only update: keep the old bytes (server side), add new ones after
        handle = store.begin_parts("arr/c/3/3", STAGING)
        kept = store.copy_part(handle, 0, "arr/c/3/3", 0, size)
        assert (kept.number, kept.size) == (0, size)
        new = _data(size, seed=6)  # not the last part (the index follows): full size
        added = store.write_part(handle, 1, [new])
        assert store.get("arr/c/3/3") == old  # nothing changes before the publish
        store.finish_parts(handle, [kept, added], b"", b"index", if_version=before)
        assert store.get("arr/c/3/3") == old[:size] + new + b"index"
        assert self.leftovers(store) == []

    def test_abort_parts_leaves_nothing(self, store: ShardStore) -> None:
        self.require_parts(store)
        size = self.part_size(store)
        handle = store.begin_parts("arr/c/2/0", STAGING)
        store.write_part(handle, 0, [_data(size, seed=3)])
        store.write_part(handle, 1, [b"x" * 10])
        assert self.leftovers(store) != []
        store.abort_parts(handle)
        assert store.get("arr/c/2/0") is None
        assert self.leftovers(store) == []
        store.abort_parts(handle)  # twice is fine

    def test_finish_without_anything_publishes_nothing(self, store: ShardStore) -> None:
        self.require_parts(store)
        handle = store.begin_parts("arr/c/3/0", STAGING)
        store.finish_parts(handle, [], b"", b"")
        assert store.get("arr/c/3/0") is None
        assert self.leftovers(store) == []

    def test_cleanup_after_crashed_write(self, store: ShardStore) -> None:
        self.require_parts(store)
        size = self.part_size(store)
        done = store.begin_parts("arr/c/0/0", STAGING)
        receipt = store.write_part(done, 0, [b"finished shard"])
        store.finish_parts(done, [receipt], b"", b"")
        # a "crashed" write: two shards begun, some parts written, never finished
        for key, n_parts in [("arr/c/0/1", 2), ("arr/c/1/1", 1)]:
            handle = store.begin_parts(key, STAGING)
            for number in range(n_parts):
                store.write_part(handle, number, [_data(size, seed=number)])
        before = self.leftovers(store)
        assert before
        assert store.cleanup(STAGING, SHARDS) == len(before)
        assert self.leftovers(store) == []
        assert store.get("arr/c/0/1") is None
        assert store.get("arr/c/1/1") is None
        assert store.get("arr/c/0/0") == b"finished shard"
        assert store.cleanup(STAGING, SHARDS) == 0

    # -- pickling ----------------------------------------------------------------
    def test_pickle_round_trip(self, store: ShardStore) -> None:
        store.put("arr/c/0", [b"before"])
        copy = pickle.loads(pickle.dumps(store))
        assert type(copy) is type(store)
        assert copy.abilities == store.abilities
        assert copy.get("arr/c/0") == b"before"
        copy.put("arr/c/1", [b"from the copy"])
        assert copy.get("arr/c/1") == b"from the copy"

    def test_pickled_stores_write_parts_of_one_object(self, store: ShardStore) -> None:
        """Parts from unpickled copies (as on Dask workers) join one object."""
        self.require_parts(store)
        size = self.part_size(store)
        handle = pickle.loads(pickle.dumps(store.begin_parts("arr/c/0/0", STAGING)))
        parts = [_data(size, seed=7), b"tail end"]
        receipts = [
            pickle.loads(pickle.dumps(store)).write_part(handle, i, [part])
            for i, part in enumerate(parts)
        ]
        store.finish_parts(handle, pickle.loads(pickle.dumps(receipts)), b"", b"")
        assert store.get("arr/c/0/0") == b"".join(parts)
