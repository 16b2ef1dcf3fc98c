"""Shared pieces of the storage contract suites: hooks, fixtures, helpers.

See :mod:`shardpipe.testing.backends` for how to use the suites.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from shardpipe.errors import (
    PartsNotSupportedError,
)
from shardpipe.storage.base import ShardStore
from shardpipe.storage.keys import STAGING_DIR
from shardpipe.storage.parts import PartReceipt, PartsHandle

MiB = 2**20
STAGING = f"arr/{STAGING_DIR}/run1"
SHARDS = "arr/c"


def _data(n: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(n)


def _split(data: bytes) -> list[Any]:
    """Hand bytes over as several buffers of different types."""
    half = len(data) // 2
    return [memoryview(data)[:half], bytearray(data[half:])]


class StoreTestBase:
    """Hooks and fixtures of the suites; subclass and implement ``make_store``, ``leftovers``.

    Attributes
    ----------
    atomic_conditions : bool
        Whether the storage under test decides conditional writes atomically
        (True for the real thing; False for a test server that checks the
        condition, then writes, without a lock).
    racing_writers : int
        How many threads race in the conditional-write races.
    """

    atomic_conditions: bool = True
    racing_writers: int = 4

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
