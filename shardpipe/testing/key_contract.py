"""The key discipline of the storage contract: unsafe keys refused before any I/O.

Part of :class:`shardpipe.testing.backends.ShardStoreTests`; kept in its own
module so that each part of the contract reads on its own. Every method of
a backend that takes a key or a key prefix (reads, writes, links, listings,
deletions, parts, clean-ups) must refuse one that could lead outside the
store (:func:`shardpipe.core.keys.key_problem`) with
:class:`~shardpipe.errors.UnsafeKeyError`, and change nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from shardpipe.errors import UnsafeKeyError
from shardpipe.storage.base import ShardStore
from shardpipe.storage.parts import PartReceipt, PartsHandle
from shardpipe.testing.store_kit import STAGING, StoreTestBase

UNSAFE_KEYS = [
    "../outside",
    "arr/../../outside",
    "arr/c/..",
    "/absolute/key",
    "arr//c/0",
    "./arr/c/0",
    "arr/c/0\0x",
    "arr\\..\\outside",
    "",
]
"""Keys no backend may act on."""

UNSAFE_PREFIXES = ["../", "..", "arr/../../", "/", "/etc", "arr//", "a\0"]
"""Key prefixes no backend may list, prune or clean up under."""


def _calls(store: ShardStore, key: str) -> dict[str, Callable[[], Any]]:
    """Every keyed method of ``store``, called with ``key`` where a key goes."""
    handle = PartsHandle(key, f"{STAGING}/upload", STAGING)
    safe = PartsHandle("arr/c/9", f"{STAGING}/upload", STAGING)
    calls: dict[str, Callable[[], Any]] = {
        "put": lambda: store.put(key, [b"x"]),
        "put if_absent": lambda: store.put(key, [b"x"], if_absent=True),
        "put_streamed": lambda: store.put_streamed(key, iter([b"x"])),
        "get": lambda: store.get(key),
        "get_range": lambda: store.get_range(key, 0, 1),
        "get_into": lambda: store.get_into(key, bytearray(1)),
        "size": lambda: store.size(key),
        "version": lambda: store.version(key),
        "delete": lambda: store.delete(key),
        "delete_many": lambda: store.delete_many(["arr/c/0", key]),
        "make_durable": lambda: store.make_durable([key]),
        "link from": lambda: store.link(key, "arr/c/8"),
        "link to": lambda: store.link("arr/c/0", key),
    }
    if store.abilities.write_at:
        calls["write_at"] = lambda: store.write_at(key, 0, [b"x"])
        calls["write_ranges"] = lambda: store.write_ranges(key, [(0, [b"x"])])
    if store.abilities.append:
        calls["append"] = lambda: store.append(key, [b"x"])
        calls["truncate"] = lambda: store.truncate(key, 0)
    if store.abilities.parts:
        calls["begin_parts"] = lambda: store.begin_parts(key, STAGING)
        calls["write_part"] = lambda: store.write_part(handle, 0, [b"x"])
        calls["finish_parts"] = lambda: store.finish_parts(
            handle, [PartReceipt(0, 1, etag='"x"', payload=b"x")], b"", b""
        )
        calls["abort_parts"] = lambda: store.abort_parts(handle)
    if store.abilities.copy_range:
        calls["copy_part from"] = lambda: store.copy_part(safe, 0, key, 0, 1)
    return calls


class KeyContractTests(StoreTestBase):
    """Unsafe keys and prefixes are refused by every method, before any I/O."""

    @pytest.mark.parametrize("key", UNSAFE_KEYS)
    def test_unsafe_keys_are_refused(self, store: ShardStore, key: str) -> None:
        store.put("arr/c/0", [b"kept"])
        before = sorted(store.list(""))
        for name, call in _calls(store, key).items():
            with pytest.raises(UnsafeKeyError) as info:
                call()
            assert repr(key) in str(info.value), name
            assert info.value.key == key, name
        assert sorted(store.list("")) == before
        assert store.get("arr/c/0") == b"kept"

    @pytest.mark.parametrize("prefix", UNSAFE_PREFIXES)
    def test_unsafe_prefixes_are_refused(self, store: ShardStore, prefix: str) -> None:
        store.put("arr/c/0", [b"kept"])
        calls: dict[str, Callable[[], Any]] = {
            "list": lambda: list(store.list(prefix)),
            "prune": lambda: store.prune(prefix),
            "cleanup staging": lambda: store.cleanup(prefix, "arr/c"),
            "cleanup shards": lambda: store.cleanup(STAGING, prefix),
            "discard_staging": lambda: store.discard_staging(prefix),
        }
        for name, call in calls.items():
            with pytest.raises(UnsafeKeyError):
                call()
            assert store.get("arr/c/0") == b"kept", name
        assert sorted(store.list("")) == ["arr/c/0"]
