"""The retry layer alone: which faults are retried, how long, and that retries are idempotent."""

from __future__ import annotations

import errno
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from shardpipe.errors import (
    ConditionFailedError,
    InvalidArgumentError,
    StorageAccessError,
    StorageError,
    StorageFullError,
    TransientStorageError,
    UnsafeKeyError,
)
from shardpipe.storage.base import ShardStore
from shardpipe.storage.errnos import is_transient
from shardpipe.storage.local.store import LocalShardStore
from shardpipe.storage.retry import RetryingStore, RetryPolicy, retries_so_far
from shardpipe.testing.faults import FaultyStore
from shardpipe.testing.key_contract import KeyContractTests


@pytest.mark.parametrize(
    ("err", "transient"),
    [
        (OSError(errno.EAGAIN, "again"), True),
        (OSError(errno.EINTR, "interrupted"), True),
        (OSError(errno.ETIMEDOUT, "timed out"), True),
        (OSError(errno.ECONNRESET, "reset"), True),
        (TransientStorageError("503"), True),
        (OSError(errno.ENOSPC, "full"), False),
        (OSError(errno.EIO, "i/o"), False),
        (FileNotFoundError(errno.ENOENT, "absent"), False),
        (StorageError("other"), False),
        (ConditionFailedError("412"), False),
        (ValueError("a bug"), False),
    ],
)
def test_what_is_transient(err: BaseException, transient: bool) -> None:
    assert is_transient(err) is transient


@pytest.mark.parametrize(
    ("errno_", "kind", "words"),
    [
        (errno.ENOSPC, StorageFullError, "resume=True"),
        (errno.EDQUOT, StorageFullError, "quota"),
        (errno.EROFS, StorageAccessError, "read-write"),
        (errno.EACCES, StorageAccessError, "permissions"),
        (errno.EIO, StorageError, "the device failed"),
    ],
)
def test_permanent_faults_fail_at_once(
    tmp_path: Path, errno_: int, kind: type[Exception], words: str
) -> None:
    calls = []

    class Broken(LocalShardStore):
        def put(self, key, buffers, *, if_absent=False, if_version=None):  # type: ignore[no-untyped-def]
            calls.append(key)
            raise OSError(errno_, "injected")

    store = RetryingStore(Broken(tmp_path), sleep=lambda s: None)
    with pytest.raises(kind, match=words) as caught:
        store.put("c/0/1", [b"x"])
    assert calls == ["c/0/1"]  # not retried
    assert "'c/0/1'" in str(caught.value)


def test_policy_bounds_and_validation() -> None:
    policy = RetryPolicy(attempts=5, first_delay=1.0, max_delay=3.0)
    rng = random.Random(0)
    for retry, bound in [(1, 1.0), (2, 2.0), (3, 3.0), (4, 3.0)]:
        delays = [policy.delay(retry, rng) for _ in range(200)]
        assert min(delays) >= 0 and max(delays) <= bound
        assert max(delays) > 0.8 * bound  # full jitter spreads over the whole range
    assert policy.worst_case_seconds == 1 + 2 + 3 + 3
    for bad in [dict(attempts=0), dict(attempts=1.5), dict(first_delay=-1), dict(max_delay="1")]:
        with pytest.raises(InvalidArgumentError, match="retry"):
            RetryPolicy(**bad)  # type: ignore[arg-type]


_FORKED_WAITS = """
import os
from shardpipe.storage.retry import RetryPolicy, _JITTER

policy = RetryPolicy(first_delay=1.0)
for _ in range(2):
    if os.fork() == 0:
        print(policy.delay(1, _JITTER), flush=True)
        os._exit(0)
    os.wait()
"""


def test_processes_forked_from_one_parent_wait_apart() -> None:
    # one draw of the waits serves the process: a forked child draws its own, so that
    # workers forked at once and failing at once do not all retry at the same moment
    out = subprocess.run(
        [sys.executable, "-c", _FORKED_WAITS], capture_output=True, text=True, check=True
    ).stdout.split()
    assert len(out) == 2 and out[0] != out[1], out


def test_gives_up_after_the_policy_and_counts(tmp_path: Path) -> None:
    faulty = FaultyStore(LocalShardStore(tmp_path), share=1.0, kinds=("transient",))
    waits: list[float] = []
    store = RetryingStore(faulty, RetryPolicy(attempts=4, first_delay=0.1), sleep=waits.append)
    before = retries_so_far()
    with pytest.raises(TransientStorageError, match="after 4 tries"):
        store.get("zarr.json")
    assert len(waits) == 3 and retries_so_far() - before == 3
    assert faulty.injected["transient"] == 4


def test_a_lost_answer_is_retried_idempotently(tmp_path: Path) -> None:
    inner = LocalShardStore(tmp_path)
    inner.put("shard", [b"0123456789"])
    # the append lands, its answer is lost: the retry must not append twice
    faulty = FaultyStore(inner, share=1.0, kinds=("lost",), calls=frozenset({"append"}))
    store = RetryingStore(faulty, RetryPolicy(attempts=3), sleep=lambda s: None)
    with pytest.raises(TransientStorageError):
        store.append("shard", [b"abc"])  # every answer is lost: gives up
    # three tries landed; each retry first cut the object back: the bytes went in once
    assert inner.get("shard") == b"0123456789abc"
    assert faulty.injected["lost"] == 3


def test_a_create_only_put_whose_answer_was_lost_succeeds(tmp_path: Path) -> None:
    inner = LocalShardStore(tmp_path)
    faulty = FaultyStore(inner, share=1.0, kinds=("lost",), calls=frozenset({"put"}))
    store = RetryingStore(faulty, RetryPolicy(attempts=3), sleep=lambda s: None)

    lost_once = {"n": 0}
    real_put = faulty.put

    def put_losing_first_answer(key, buffers, **conditions):  # type: ignore[no-untyped-def]
        if lost_once["n"] == 0:
            lost_once["n"] += 1
            real_put(key, buffers, **conditions)  # lands, then the answer is lost
        else:
            inner.put(key, buffers, **conditions)

    faulty.put = put_losing_first_answer  # type: ignore[method-assign]
    store.put("marker", [b"mine"], if_absent=True)  # no ConditionFailedError
    assert inner.get("marker") == b"mine"
    # someone else's object is still a failed condition
    with pytest.raises(ConditionFailedError):
        RetryingStore(inner).put("marker", [b"theirs"], if_absent=True)


def test_a_create_only_put_loses_to_another_writer_after_a_fault(tmp_path: Path) -> None:
    """The first try fails in transit without landing; meanwhile another writer creates
    the key with other bytes: the retry's failed condition must stand."""
    inner = LocalShardStore(tmp_path)
    tries = {"n": 0}

    class Racing(LocalShardStore):
        def put(self, key, buffers, *, if_absent=False, if_version=None):  # type: ignore[no-untyped-def]
            tries["n"] += 1
            if tries["n"] == 1:
                inner.put(key, [b"theirs"])  # another writer gets there first
                raise TransientStorageError("injected: connection reset before the server")
            super().put(key, buffers, if_absent=if_absent, if_version=if_version)

    store = RetryingStore(Racing(tmp_path), RetryPolicy(attempts=3), sleep=lambda s: None)
    with pytest.raises(ConditionFailedError):
        store.put("marker", [b"mine"], if_absent=True)
    assert inner.get("marker") == b"theirs" and tries["n"] == 2


def test_a_streamed_put_that_fails_midway_is_retried_without_asking_the_producer_again(
    tmp_path: Path,
) -> None:
    """The retry writes the buffers produced so far, then the rest: the producer runs once."""
    tries = []

    class FailsOnce(LocalShardStore):
        def put_streamed(self, key, buffers):  # type: ignore[no-untyped-def]
            tries.append(key)
            if len(tries) == 1:
                next(iter(buffers))  # the first buffer is written, then the device times out
                raise OSError(errno.ETIMEDOUT, "injected")
            return super().put_streamed(key, buffers)

    asked = []

    def produce():  # type: ignore[no-untyped-def]
        for i in range(4):
            asked.append(i)
            yield bytes([i]) * 3

    store = RetryingStore(FailsOnce(tmp_path), sleep=lambda s: None)
    assert store.put_streamed("c/0", produce()) == 12
    assert store.get("c/0") == b"\0\0\0\1\1\1\2\2\2\3\3\3"
    assert asked == [0, 1, 2, 3] and len(tries) == 2


def test_a_streamed_put_whose_producer_fails_is_not_retried(tmp_path: Path) -> None:
    """Even a producer failure that looks transient (EAGAIN) passes through: no torn shard."""
    tries = []

    class Counting(LocalShardStore):
        def put_streamed(self, key, buffers):  # type: ignore[no-untyped-def]
            tries.append(key)
            return super().put_streamed(key, buffers)

    def produce():  # type: ignore[no-untyped-def]
        yield b"first"
        raise OSError(errno.EAGAIN, "the producer's own failure")

    store = RetryingStore(Counting(tmp_path), sleep=lambda s: None)
    with pytest.raises(OSError, match="the producer's own failure"):
        store.put_streamed("c/0", produce())
    assert tries == ["c/0"]
    assert store.get("c/0") is None
    assert not list(tmp_path.rglob("*.shardpipe-tmp"))


class _BrokenListing(LocalShardStore):
    """The ``k``-th listing fails transiently after ``k * every`` keys, ``fails`` times in all."""

    def __init__(self, root: Path, every: int, fails: int) -> None:
        super().__init__(root, fsync=False)
        self.every, self.fails, self.listings = every, fails, 0

    def list(self, prefix: str) -> Iterator[str]:
        self.listings += 1
        for n, key in enumerate(super().list(prefix), 1):
            yield key
            if n == self.every * self.listings and self.fails:
                self.fails -= 1
                raise OSError(errno.ECONNRESET, "injected: connection reset while listing")


def test_a_listing_streams_and_carries_on_after_the_last_key(tmp_path: Path) -> None:
    keys = sorted(f"arr/c/{i}/{j}" for i in range(12) for j in range(10))
    inner = _BrokenListing(tmp_path, every=25, fails=4)
    for key in keys:
        inner.put(key, [b"x"])
    store = RetryingStore(inner, RetryPolicy(attempts=2), sleep=lambda s: None)
    listing = store.list("arr/c/")
    assert next(listing) == keys[0] and inner.listings == 1  # nothing listed ahead
    assert [keys[0], *listing] == keys  # each key once, in order, after 4 faults
    assert inner.listings == 5 and inner.fails == 0


def test_a_listing_that_stops_bringing_keys_gives_up_after_the_policy(tmp_path: Path) -> None:
    class Stuck(LocalShardStore):
        def list(self, prefix: str) -> Iterator[str]:
            yield from list(super().list(prefix))[:1]
            raise OSError(errno.ECONNRESET, "injected: connection reset while listing")

    inner = Stuck(tmp_path, fsync=False)
    inner.put("arr/c/0", [b"x"])
    inner.put("arr/c/1", [b"x"])
    store = RetryingStore(inner, RetryPolicy(attempts=3), sleep=lambda s: None)
    listing = store.list("arr/c/")
    assert next(listing) == "arr/c/0"  # given as it came, before the listing failed
    with pytest.raises(TransientStorageError, match="listing 'arr/c/' still failed after 3"):
        next(listing)


class TestRetryingKeys(KeyContractTests):
    """Unsafe keys pass through the retries untouched: refused at once, never retried."""

    def make_store(self, tmp_path: Path, request: pytest.FixtureRequest) -> ShardStore:
        return RetryingStore(LocalShardStore(tmp_path / "root"), RetryPolicy(attempts=3))


def test_a_long_delete_retries_only_the_slice_that_failed(tmp_path: Path) -> None:
    """2,500 keys go in slices of 1,000; a fault in the third sends only it again."""
    from collections.abc import Sequence

    from shardpipe.storage.retry import DELETE_SLICE

    keys = [f"c/{n:04}" for n in range(2 * DELETE_SLICE + 500)]
    late = keys[2 * DELETE_SLICE]

    class FailsOnce(LocalShardStore):
        def __init__(self, root: Path) -> None:
            super().__init__(root, fsync=False)
            self.sent: list[int] = []
            self.failed = False

        def delete_many(self, keys: Sequence[str]) -> None:
            self.sent.append(len(keys))
            if late in keys and not self.failed:  # the first call holding the late key
                self.failed = True
                raise TransientStorageError("the connection was reset")
            super().delete_many(keys)

    inner = FailsOnce(tmp_path)
    for key in keys[::250]:
        inner.put(key, [b"x"])
    store = RetryingStore(inner, RetryPolicy(attempts=3), sleep=lambda s: None)
    store.delete_many(keys)
    assert inner.sent == [DELETE_SLICE, DELETE_SLICE, 500, 500]  # before: [2500, 2500]
    assert list(inner.list("c/")) == []


def test_a_bad_key_in_a_long_delete_removes_nothing(tmp_path: Path) -> None:
    """Every key is checked before the first slice goes: a bad one late stops them all."""
    inner = LocalShardStore(tmp_path, fsync=False)
    keys = [f"c/{n:04}" for n in range(1500)]
    for key in keys:
        inner.put(key, [b"x"])
    store = RetryingStore(inner, RetryPolicy(attempts=3), sleep=lambda s: None)
    with pytest.raises(UnsafeKeyError):
        store.delete_many([*keys, "../outside"])
    assert len(list(inner.list("c/"))) == 1500
