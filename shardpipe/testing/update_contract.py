"""The storage contract for updates: versions, conditional publishes, in-place writes, composes.

Part of :class:`shardpipe.testing.backends.ShardStoreTests`; kept in its own
module by topic.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from shardpipe.errors import (
    AbilityNotSupportedError,
    ConditionFailedError,
    PartsNotSupportedError,
)
from shardpipe.storage.base import ShardStore
from shardpipe.storage.parts import PartsHandle
from shardpipe.testing.store_kit import STAGING, MiB, StoreTestBase, _data


class UpdateContractTests(StoreTestBase):
    """Versions, conditional publishes, ``write_at``, ``append``, ``copy_part``."""

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
        with pytest.raises(ConditionFailedError):  # the very same bytes are refused too
            store.put("arr/c/x", [b"first"], if_absent=True)
        store.delete("arr/c/x")
        store.put("arr/c/x", [b"third"], if_absent=True)  # absent again: allowed
        assert store.get("arr/c/x") == b"third"
        assert self.leftovers(store) == []

    def test_replace_if_unchanged_put(self, store: ShardStore) -> None:
        store.put("arr/c/y", [b"one"])
        read = store.version("arr/c/y")
        assert read is not None
        store.put("arr/c/y", [b"two"], if_version=read)
        assert store.get("arr/c/y") == b"two"
        now = store.version("arr/c/y")
        with pytest.raises(ConditionFailedError, match="arr/c/y") as failed:
            store.put("arr/c/y", [b"three"], if_version=read)  # stale: changed since
        assert store.get("arr/c/y") == b"two"
        assert store.version("arr/c/y") == now
        assert read in str(failed.value)  # says what it expected
        with pytest.raises(ConditionFailedError):
            store.put("arr/c/absent", [b"x"], if_version=read)
        assert store.get("arr/c/absent") is None
        assert self.leftovers(store) == []

    def _race(self, store: ShardStore, key: str, **condition: Any) -> None:
        """Racing conditional puts of different bytes: one wins, the others are told."""
        n = self.racing_writers
        payloads = [f"writer {i} ".encode() * (i + 1) for i in range(n)]
        start = threading.Barrier(n)

        def write(i: int) -> bool:
            start.wait()
            try:
                store.put(key, [payloads[i]], **condition)
            except ConditionFailedError:
                return False
            return True

        with ThreadPoolExecutor(n) as pool:
            won = [i for i, ok in enumerate(pool.map(write, range(n))) if ok]
        if self.atomic_conditions:
            assert len(won) == 1, f"writers {won} all succeeded"
        else:
            assert won, "every writer was refused"
        assert store.get(key) in [payloads[i] for i in won]
        assert self.leftovers(store) == []

    def test_create_only_race(self, store: ShardStore) -> None:
        if not store.abilities.create_only:
            pytest.skip(
                f"{type(store).__name__} declares no create_only: it checks, then writes, "
                "so racing writers may all succeed"
            )
        self._race(store, "arr/c/race", if_absent=True)

    def test_replace_if_unchanged_race(self, store: ShardStore) -> None:
        if not store.abilities.replace_if_unchanged:
            pytest.skip(
                f"{type(store).__name__} declares no replace_if_unchanged: it checks the "
                "version just before publishing, so racing writers may all succeed"
            )
        store.put("arr/c/race", [b"the version all writers read"])
        read = store.version("arr/c/race")
        assert read is not None
        self._race(store, "arr/c/race", if_version=read)

    # -- in-place updates ------------------------------------------------------
    def test_write_at(self, store: ShardStore) -> None:
        if not store.abilities.write_at:
            store.put("arr/c/w", [b"abc"])
            with pytest.raises(AbilityNotSupportedError):
                store.write_at("arr/c/w", 0, [b"x"])
            pytest.skip(f"{type(store).__name__} declares no write_at (and refuses it)")
        store.put("arr/c/w", [b"0123456789"])
        versions = [store.version("arr/c/w")]
        store.write_at("arr/c/w", 3, [b"ab", memoryview(b"c")])
        assert store.get("arr/c/w") == b"012abc6789"
        versions.append(store.version("arr/c/w"))
        store.write_at("arr/c/w", 3, [b"ABC"])  # same size, at once: a new version still
        assert store.get("arr/c/w") == b"012ABC6789"
        versions.append(store.version("arr/c/w"))
        store.write_at("arr/c/w", 8, [b"XYZ"])  # may grow the object
        assert store.get("arr/c/w") == b"012ABC67XYZ"
        store.write_at("arr/c/w", 11, [b"!"])  # at the very end: appends
        assert store.get("arr/c/w") == b"012ABC67XYZ!"
        versions.append(store.version("arr/c/w"))
        assert len(set(versions)) == len(versions)
        with pytest.raises(ValueError, match="offset"):
            store.write_at("arr/c/w", 13, [b"!"])
        with pytest.raises(ValueError, match="offset"):
            store.write_at("arr/c/w", -1, [b"!"])
        assert store.get("arr/c/w") == b"012ABC67XYZ!"
        with pytest.raises(FileNotFoundError):
            store.write_at("arr/c/absent", 0, [b"!"])
        assert store.get("arr/c/absent") is None

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
        assert store.append("arr/c/a", [b""]) == 12
        big = _data(3 * MiB, seed=8)
        assert store.append("arr/c/a", [memoryview(big)[:MiB], big[MiB:]]) == 12 + len(big)
        assert store.get_range("arr/c/a", 12, 12 + len(big)) == big
        with pytest.raises(FileNotFoundError):
            store.append("arr/c/absent", [b"!"])
        assert store.get("arr/c/absent") is None

    def test_conditional_finish_parts(self, store: ShardStore) -> None:
        self.require_parts(store)
        key = "arr/c/2/2"

        def attempt(body: bytes, **condition: Any) -> None:
            """Write ``body`` as one part and publish it under ``condition``."""
            handle = store.begin_parts(key, STAGING)
            receipt = store.write_part(handle, 0, [body])
            try:
                store.finish_parts(handle, [receipt], b"", b"", **condition)
            except ConditionFailedError:
                store.abort_parts(handle)  # a failed publish leaves the parts to undo
                raise

        attempt(b"created", if_absent=True)
        assert store.get(key) == b"created"
        with pytest.raises(ConditionFailedError, match="arr/c/2/2"):
            attempt(b"mine", if_absent=True)
        assert store.get(key) == b"created"

        stale = store.version(key)
        store.put(key, [b"changed by someone else"])
        current = store.version(key)
        with pytest.raises(ConditionFailedError, match="arr/c/2/2"):
            attempt(b"mine", if_version=stale)
        assert store.get(key) == b"changed by someone else"
        assert store.version(key) == current
        attempt(b"mine", if_version=current)
        assert store.get(key) == b"mine"
        assert store.version(key) not in (stale, current)

        mine = store.version(key)
        assert mine is not None
        store.delete(key)
        with pytest.raises(ConditionFailedError):  # the version read is gone with the key
            attempt(b"again", if_version=mine)
        assert store.get(key) is None
        assert self.leftovers(store) == []

    def require_copy_range(self, store: ShardStore) -> None:
        """Skip unless the store copies ranges, after checking that it refuses them."""
        if not store.abilities.copy_range:
            store.put("arr/c/source", [b"source bytes"])
            handle = PartsHandle("arr/c/3/3", "upload-id", STAGING)
            if store.abilities.parts:
                handle = store.begin_parts("arr/c/3/3", STAGING)
            with pytest.raises((AbilityNotSupportedError, PartsNotSupportedError)):
                store.copy_part(handle, 0, "arr/c/source", 0, 4)
            if store.abilities.parts:
                store.abort_parts(handle)
            pytest.skip(f"{type(store).__name__} declares no copy_range (and refuses it)")
        self.require_parts(store)

    def test_copy_part_composes_from_the_old_object(self, store: ShardStore) -> None:
        self.require_copy_range(store)
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
        assert store.version("arr/c/3/3") != before
        assert self.leftovers(store) == []

    def test_copy_part_of_a_range_of_another_object(self, store: ShardStore) -> None:
        self.require_copy_range(store)
        size = self.part_size(store)
        source = _data(2 * size + 1000, seed=9)
        store.put("arr/c/src", [source])
        handle = store.begin_parts("arr/c/4/4", STAGING)
        with pytest.raises(FileNotFoundError):
            store.copy_part(handle, 0, "arr/c/absent", 0, size)
        middle = store.copy_part(handle, 0, "arr/c/src", 700, 700 + size)
        last = store.copy_part(handle, 1, "arr/c/src", 2 * size, 2 * size + 1000)
        assert (middle.size, last.size) == (size, 1000)
        store.put("arr/c/src", [b"replaced after the copy"])  # the parts hold their bytes
        store.finish_parts(handle, [last, middle], b"", b"", if_absent=True)
        assert store.get("arr/c/4/4") == source[700 : 700 + size] + source[2 * size :]
        assert store.get("arr/c/src") == b"replaced after the copy"
        assert self.leftovers(store) == []

    def test_compose_refused_when_the_object_changed(self, store: ShardStore) -> None:
        """An append composed from a version that was replaced meanwhile is not published."""
        self.require_copy_range(store)
        size = self.part_size(store)
        old = _data(size, seed=10)
        store.put("arr/c/5/5", [old])
        before = store.version("arr/c/5/5")
        handle = store.begin_parts("arr/c/5/5", STAGING)
        kept = store.copy_part(handle, 0, "arr/c/5/5", 0, size)
        added = store.write_part(handle, 1, [b"appended"])
        store.put("arr/c/5/5", [b"another writer's object"])
        with pytest.raises(ConditionFailedError, match="arr/c/5/5"):
            store.finish_parts(handle, [kept, added], b"", b"", if_version=before)
        assert store.get("arr/c/5/5") == b"another writer's object"
        store.abort_parts(handle)
        assert self.leftovers(store) == []
