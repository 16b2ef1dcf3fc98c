"""The contract every shardpipe storage backend keeps, as an inheritable pytest suite.

Subclass :class:`ShardStoreTests` in a test module and implement
:meth:`~shardpipe.testing.store_kit.StoreTestBase.make_store` and
:meth:`~shardpipe.testing.store_kit.StoreTestBase.leftovers` (what unfinished or refused writes
left behind: staging files, temporary
files, open uploads); pytest collects every test method::

    from shardpipe.testing.backends import ShardStoreTests

    class TestMyStore(ShardStoreTests):
        def make_store(self, tmp_path, request):
            return MyShardStore(tmp_path / "root")

        def leftovers(self, store):
            return sorted(...)  # staging files or open uploads of unfinished writes

Tests of an ability the backend declares absent (``store.abilities``) check
that the method refuses with ``AbilityNotSupportedError`` (or
``PartsNotSupportedError``), then skip with that reason. Conditional writes
are tested on every backend (a backend without ``create_only`` or
``replace_if_unchanged`` still checks just before publishing); racing
conditional writers must have exactly one winner where the ability is
declared. A test server that checks conditions without a lock (moto) sets
:attr:`~shardpipe.testing.store_kit.StoreTestBase.atomic_conditions` to False: the races then only
check that every loser was told and the object is a winner's.

Every backend must also keep keys inside the store
(:class:`~shardpipe.testing.key_contract.KeyContractTests`, part of the
suite): unsafe keys and prefixes are refused before any I/O.

Needs the ``test`` extra (pytest).
"""

from __future__ import annotations

import pickle
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from shardpipe.storage.base import ShardStore, StoreAbilities
from shardpipe.testing.key_contract import KeyContractTests
from shardpipe.testing.store_kit import SHARDS, STAGING, MiB, _data, _split
from shardpipe.testing.update_contract import UpdateContractTests

__all__ = ["SHARDS", "STAGING", "ShardStoreTests"]


class ShardStoreTests(UpdateContractTests, KeyContractTests):
    """The contract tests; subclass and implement ``make_store`` and ``leftovers``."""

    # -- declarations ------------------------------------------------------------
    def test_abilities_are_declared(self, store: ShardStore) -> None:
        abilities = store.abilities
        assert isinstance(abilities, StoreAbilities)
        assert store.supports_parts == abilities.parts
        assert store.min_part_size == abilities.min_part_size >= 0
        assert store.max_parts == abilities.max_parts
        assert abilities.max_parts is None or abilities.max_parts >= 1
        if abilities.copy_range:
            assert abilities.parts, "copy_part makes parts: copy_range needs parts"

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

    def test_delete_many(self, store: ShardStore) -> None:
        """Every key given goes, absent ones included; the others stay."""
        keys = [f"arr/c/{i}/0" for i in range(5)]
        for key in keys:
            store.put(key, [key.encode()])
        store.delete_many([*keys[1:4], "arr/c/9/9"])  # one absent
        assert sorted(store.list("arr/c/")) == [keys[0], keys[4]]
        store.delete_many([])
        store.delete_many(keys)
        assert list(store.list("arr/c/")) == []

    def test_get_within(self, store: ShardStore) -> None:
        """The size always; the bytes up to the limit (an object store: one request)."""
        data = _data(100_000, seed=2)
        assert store.get_within("arr/c/2", 10) is None
        store.put("arr/c/2", [data])
        assert store.get_within("arr/c/2", 100_000) == (100_000, data)
        assert store.get_within("arr/c/2", 1 << 40) == (100_000, data)
        assert store.get_within("arr/c/2", 99_999) == (100_000, None)
        store.put("arr/c/3", [b""])
        assert store.get_within("arr/c/3", 0) == (0, b"")
        assert store.get_within("arr/c/3", 8) == (0, b"")

    def test_get_within_never_takes_part_of_a_replacement_for_the_object(
        self, store: ShardStore, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """An object replaced by a larger one while it is read comes whole, old or new."""
        old, new = _data(1_000, seed=3), _data(3_000, seed=4)
        store.put("arr/c/4", [old])
        size = store.size

        def size_then_replace(key: str) -> int | None:
            found = size(key)
            store.put(key, [new])  # another writer, between the size and the bytes
            return found

        monkeypatch.setattr(store, "size", size_then_replace)
        assert store.get_within("arr/c/4", 10_000) in [(1_000, old), (3_000, new)]
        store.put("arr/c/5", [old])  # grown past the limit this time
        assert store.get_within("arr/c/5", 2_000) in [(1_000, old), (3_000, None)]

    def test_get_into(self, store: ShardStore) -> None:
        """An object read into a buffer of its size; absent: False, the buffer untouched."""
        data = _data(100_000, seed=5)
        out = bytearray(b"u" * 100_000)
        assert store.get_into("arr/c/6", out) is False
        assert out == b"u" * 100_000
        store.put("arr/c/6", [data])
        assert store.get_into("arr/c/6", out) is True
        assert out == data
        numbers = np.zeros(25_000, dtype="<u4")  # a block's place, as a raw copy reads it
        assert store.get_into("arr/c/6", numbers) is True
        assert numbers.tobytes() == data
        for wrong in (99_999, 100_001):
            with pytest.raises(ValueError, match=f"100000 bytes, not the {wrong}"):
                store.get_into("arr/c/6", bytearray(wrong))
        store.put("arr/c/7", [b""])
        assert store.get_into("arr/c/7", bytearray()) is True

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
        assert sorted(store.list("arr/c/")) == keys[:3]

    def test_list_is_a_string_prefix(self, store: ShardStore) -> None:
        keys = ["arr/c/1", "arr/c/10", "arr/c/12/0", "arr/c/2/1"]
        for key in keys:
            store.put(key, [b"x"])
        assert sorted(store.list("arr/c/1")) == keys[:3]
        assert sorted(store.list("arr/c/12")) == ["arr/c/12/0"]
        assert sorted(store.list("arr/c/10")) == ["arr/c/10"]
        assert list(store.list("arr/c/3")) == []

    def test_list_is_in_string_order(self, store: ShardStore) -> None:
        """Keys come sorted as strings (a retried listing carries on after the last one)."""
        keys = ["arr/c/0/1", "arr/c/0.5", "arr/c/0/0", "arr/c/10/0", "arr/c/1-x", "arr/c/1", "a"]
        for key in keys:
            store.put(key, [b"x"])
        assert list(store.list("arr/c/")) == sorted(keys[:-1])
        assert list(store.list("")) == sorted(keys)

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

    def test_put_streamed_publishes_once_every_buffer_is_written(self, store: ShardStore) -> None:
        """Nothing is at the key while buffers are produced; then all of them are."""
        data = _data(3 * MiB + 7, seed=2)
        store.put("arr/c/0", [b"old"])
        seen_while_producing = []

        def produce() -> Iterator[bytes]:
            for start in range(0, len(data), MiB // 2):
                seen_while_producing.append(store.get("arr/c/0"))
                yield data[start : start + MiB // 2]

        assert store.put_streamed("arr/c/0", produce()) == len(data)
        assert store.get("arr/c/0") == data
        assert seen_while_producing == [b"old"] * len(seen_while_producing)
        assert self.leftovers(store) == []

    def test_put_streamed_whose_producer_fails_publishes_nothing(self, store: ShardStore) -> None:
        store.put("arr/c/0", [b"old"])

        def produce() -> Iterator[bytes]:
            yield b"x" * MiB
            raise ValueError("encoding failed")

        with pytest.raises(ValueError, match="encoding failed"):
            store.put_streamed("arr/c/0", produce())
        with pytest.raises(ValueError, match="encoding failed"):
            store.put_streamed("arr/c/1", produce())
        assert store.get("arr/c/0") == b"old"
        assert store.get("arr/c/1") is None
        assert self.leftovers(store) == []

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

    @pytest.mark.parametrize("index_location", ["start", "end"])
    def test_parts_in_any_order_lie_where_their_layout_says(
        self, store: ShardStore, index_location: str
    ) -> None:
        """With ``any_order`` a backend may place parts as written; ``part_layout`` finds them."""
        self.require_parts(store)
        size = self.part_size(store)
        sizes = [size, size, size if index_location == "end" else 1000]
        parts = [_data(n, seed=10 + i) for i, n in enumerate(sizes)]
        head = _data(100, seed=98).ljust(store.min_part_size, b"\0")
        head, tail = (head, b"") if index_location == "start" else (b"", b"index at the end")
        handle = store.begin_parts("arr/c/0/0", STAGING, any_order=True)
        with ThreadPoolExecutor(3) as pool:
            futures = [
                pool.submit(store.write_part, handle, i, _split(parts[i])) for i in (2, 0, 1)
            ]
            receipts = [f.result() for f in futures]
        parts[0] = _data(size, seed=97)
        receipts[1] = store.write_part(handle, 0, [parts[0]])  # a retry: it is what counts
        layout = store.part_layout(receipts)
        store.finish_parts(handle, receipts, head, tail)
        found = store.get("arr/c/0/0")
        assert found is not None
        assert len(found) == len(head) + layout.nbytes + len(tail)
        assert found.startswith(head) and found.endswith(tail)
        for receipt, start in zip(receipts, layout.starts, strict=True):
            at = len(head) + start
            assert found[at : at + receipt.size] == parts[receipt.number]
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
