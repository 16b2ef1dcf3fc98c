"""Parts written in any order on a local disk: placed once, never copied on one machine."""

from __future__ import annotations

import contextlib
import errno
import multiprocessing
import os
import signal
import threading
from pathlib import Path

import pytest

from shardpipe.errors import ConditionFailedError
from shardpipe.storage.base import ShardStore
from shardpipe.storage.local import parts as parts_module
from shardpipe.storage.local.store import LocalShardStore
from shardpipe.storage.parts import PartReceipt, PartsHandle, lay_out_parts
from shardpipe.storage.retry import RetryingStore, RetryPolicy

FAST = RetryPolicy(attempts=3, first_delay=0, max_delay=0)

STAGING = "arr/.shardpipe/staging/job"
KEY = "arr/c/0/0"


def _staged(root: Path) -> list[Path]:
    return sorted(p for p in (root / "arr/.shardpipe/staging").rglob("*") if p.is_file())


def _write(store: ShardStore, handle: PartsHandle, number: int, data: bytes) -> PartReceipt:
    return store.write_part(handle, number, [data[:3], data[3:]])


def test_parts_of_one_process_become_the_object_without_a_copy(tmp_path: Path) -> None:
    store = LocalShardStore(tmp_path, fsync=False)
    handle = store.begin_parts(KEY, STAGING, any_order=True)
    parts = {n: bytes([n]) * (1000 + n) for n in range(3)}
    receipts = [_write(store, handle, n, parts[n]) for n in (2, 0, 1)]
    (placed,) = _staged(tmp_path)  # one file of this process
    inode = placed.stat().st_ino
    assert [r.offset for r in receipts] == [0, 1002, 2002]  # in the order written
    store.finish_parts(handle, receipts, b"", b"INDEX")
    shard = tmp_path / KEY
    assert shard.stat().st_ino == inode  # the placed file itself, not a copy
    assert shard.read_bytes() == parts[2] + parts[0] + parts[1] + b"INDEX"
    assert _staged(tmp_path) == []


def test_a_head_puts_the_placed_parts_after_it(tmp_path: Path) -> None:
    store = LocalShardStore(tmp_path, fsync=True)
    handle = store.begin_parts(KEY, STAGING, any_order=True)
    receipts = [_write(store, handle, n, bytes([65 + n]) * 10) for n in (1, 0)]
    store.finish_parts(handle, receipts, b"HEAD", b"")
    assert (tmp_path / KEY).read_bytes() == b"HEAD" + b"B" * 10 + b"A" * 10


def _write_in_a_process(root: str, handle: PartsHandle, number: int) -> PartReceipt:
    return _write(LocalShardStore(root, fsync=False), handle, number, bytes([number]) * 500)


def _in_other_processes(root: Path, handle: PartsHandle, numbers: list[int]) -> list[PartReceipt]:
    with multiprocessing.get_context("fork").Pool(1) as pool:  # a fork names its own file
        return pool.starmap(_write_in_a_process, [(str(root), handle, n) for n in numbers])


def test_the_finishing_process_takes_its_own_file_and_appends_the_others(
    tmp_path: Path,
) -> None:
    store = LocalShardStore(tmp_path, fsync=False)
    handle = store.begin_parts(KEY, STAGING, any_order=True)
    receipts = [*_in_other_processes(tmp_path, handle, [0]), _write(store, handle, 1, b"\1" * 500)]
    assert len({r.place for r in receipts}) == 2
    mine = next(p for p in _staged(tmp_path) if p.name == receipts[1].place)
    inode = mine.stat().st_ino
    layout = store.part_layout(receipts)
    assert layout.starts == (500, 0)  # its own file first
    store.finish_parts(handle, receipts, b"", b"END")
    assert (tmp_path / KEY).stat().st_ino == inode
    assert (tmp_path / KEY).read_bytes() == b"\1" * 500 + b"\0" * 500 + b"END"
    assert _staged(tmp_path) == []


def test_parts_all_from_other_processes_are_copied_in_the_order_of_their_numbers(
    tmp_path: Path,
) -> None:
    store = LocalShardStore(tmp_path, fsync=False)
    handle = store.begin_parts(KEY, STAGING, any_order=True)
    receipts = _in_other_processes(tmp_path, handle, [1, 0])
    (theirs,) = _staged(tmp_path)  # one worker process wrote both
    inode, before = theirs.stat().st_ino, theirs.read_bytes()
    assert store.part_layout(receipts) == lay_out_parts(receipts)
    store.finish_parts(handle, receipts, b"", b"END")
    assert (tmp_path / KEY).stat().st_ino != inode  # another process's file is only read
    assert (tmp_path / KEY).read_bytes() == before + b"END"
    assert _staged(tmp_path) == []


def test_an_earlier_try_stays_as_bytes_no_receipt_claims(tmp_path: Path) -> None:
    store = LocalShardStore(tmp_path, fsync=False)
    handle = store.begin_parts(KEY, STAGING, any_order=True)
    _write(store, handle, 0, b"first try")
    receipts = [_write(store, handle, 0, b"second"), _write(store, handle, 1, b"one")]
    layout = lay_out_parts(receipts)
    store.finish_parts(handle, receipts, b"", b"")
    assert layout.starts == (9, 15)
    assert (tmp_path / KEY).read_bytes() == b"first try" + b"second" + b"one"


def test_bytes_placed_after_the_last_receipt_are_cut(tmp_path: Path) -> None:
    store = LocalShardStore(tmp_path, fsync=False)
    handle = store.begin_parts(KEY, STAGING, any_order=True)
    receipt = _write(store, handle, 0, b"kept")
    _write(store, handle, 1, b"a part whose task was given up")
    store.finish_parts(handle, [receipt], b"", b"|")
    assert (tmp_path / KEY).read_bytes() == b"kept|"


def test_a_failed_condition_leaves_the_object_and_abort_removes_the_parts(
    tmp_path: Path,
) -> None:
    store = LocalShardStore(tmp_path, fsync=False)
    store.put(KEY, [b"old"])
    handle = store.begin_parts(KEY, STAGING, any_order=True)
    receipt = _write(store, handle, 0, b"new bytes")
    with pytest.raises(ConditionFailedError, match="create-only"):
        store.finish_parts(handle, [receipt], b"", b"", if_absent=True)
    assert (tmp_path / KEY).read_bytes() == b"old"
    store.abort_parts(handle)
    assert _staged(tmp_path) == []


def test_a_placed_file_shorter_than_its_receipts_is_refused(tmp_path: Path) -> None:
    store = LocalShardStore(tmp_path, fsync=False)
    handle = store.begin_parts(KEY, STAGING, any_order=True)
    receipt = _write(store, handle, 0, b"twelve bytes")
    (placed,) = _staged(tmp_path)
    os.truncate(placed, 5)
    with pytest.raises(OSError, match="has 5 bytes, expected 12"):
        store.finish_parts(handle, [receipt], b"", b"")
    assert not (tmp_path / KEY).exists()


def test_an_object_on_another_file_system_gets_a_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LocalShardStore(tmp_path, fsync=False)
    handle = store.begin_parts(KEY, STAGING, any_order=True)
    receipts = [_write(store, handle, n, bytes([48 + n]) * 4) for n in (1, 0)]
    replace = os.replace

    def across_devices(src: str, dst: str) -> None:
        if "/staging/" in src:  # the placed file: as if the staging folder were elsewhere
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        replace(src, dst)

    monkeypatch.setattr(os, "replace", across_devices)
    store.finish_parts(handle, receipts, b"", b"!")
    assert (tmp_path / KEY).read_bytes() == b"1111" + b"0000" + b"!"
    assert _staged(tmp_path) == []


def _failing_once(monkeypatch: pytest.MonkeyPatch, module: object, name: str, err: int) -> None:
    """``module.name`` raises ``err`` on its first call, then works."""
    real = getattr(module, name)
    calls = []

    def once(*args: object, **kwargs: object) -> object:
        calls.append(args)
        if len(calls) == 1:
            raise OSError(err, os.strerror(err))
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, once)


@pytest.mark.parametrize(
    ("failing", "fsync", "if_absent"),
    [
        # after the rename (the folder's fsync): the shard is published, the retry finds it
        ("fsync_dir", True, False),
        # after a create-only link, its unlink: published too, not refused on the retry
        ("unlink", False, True),
        # before the rename: the retry takes up the sealed file again
        ("replace", False, False),
    ],
)
def test_a_finish_retried_after_a_transient_error_publishes_the_shard_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str, fsync: bool, if_absent: bool
) -> None:
    from shardpipe.storage.local import store as local_store

    store = RetryingStore(LocalShardStore(tmp_path, fsync=fsync), FAST, sleep=lambda s: None)
    handle = store.begin_parts(KEY, STAGING, any_order=True)
    receipts = [_write(store, handle, n, bytes([65 + n]) * 10) for n in (1, 0)]
    _failing_once(monkeypatch, local_store if failing == "fsync_dir" else os, failing, errno.EINTR)
    store.finish_parts(handle, receipts, b"", b"TAIL", if_absent=if_absent)
    assert (tmp_path / KEY).read_bytes() == b"B" * 10 + b"A" * 10 + b"TAIL"
    assert _staged(tmp_path) == []


def test_a_late_part_after_the_publish_never_replaces_the_shard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A part of the shard written again between a publish and a retry of the finish."""
    from shardpipe.storage.local import store as local_store

    inner = LocalShardStore(tmp_path, fsync=True)
    store = RetryingStore(inner, FAST, sleep=lambda s: None)
    handle = store.begin_parts(KEY, STAGING, any_order=True)
    receipts = [_write(store, handle, n, bytes([65 + n]) * 10) for n in (0, 1)]
    real = local_store.fsync_dir

    def late_part_then_fail(path: str) -> None:
        local_store.fsync_dir = real
        late = threading.Thread(target=inner.write_part, args=(handle, 0, [b"Z" * 20]))
        late.start()  # a duplicate task in this process: it must not wait for the publish
        late.join(timeout=10)
        assert not late.is_alive()
        raise OSError(errno.EINTR, "interrupted")

    monkeypatch.setattr(local_store, "fsync_dir", late_part_then_fail)
    store.finish_parts(handle, receipts, b"", b"TAIL")
    assert (tmp_path / KEY).read_bytes() == b"A" * 10 + b"B" * 10 + b"TAIL"


def _fork_while_the_placing_locks_are_held(root: str, handle: PartsHandle) -> int:
    with contextlib.ExitStack() as held:  # as by threads writing parts when the fork comes
        for lock in parts_module._PLACING:
            held.enter_context(lock)
        pid = os.fork()
        if pid == 0:  # the child: the locks its parent's threads held must not hold it
            signal.alarm(5)
            _write(LocalShardStore(root, fsync=False), handle, 0, b"from the child")
            os._exit(0)
    return os.waitpid(pid, 0)[1]


def test_a_forked_child_does_not_inherit_a_held_placing_lock(tmp_path: Path) -> None:
    handle = LocalShardStore(tmp_path, fsync=False).begin_parts(KEY, STAGING, any_order=True)
    status = _fork_while_the_placing_locks_are_held(str(tmp_path), handle)
    assert os.waitstatus_to_exitcode(status) == 0
