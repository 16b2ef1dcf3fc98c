"""Streamed publishes on a file system: early writeback, and what a kill -9 mid-stream leaves."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import shardpipe.storage.local.file_io as file_io
import shardpipe.storage.local.writeback as writeback
from shardpipe.storage.local.file_io import batched
from shardpipe.storage.local.store import LocalShardStore

MiB = 1 << 20


@pytest.mark.parametrize("fsync", [True, False])
def test_writeback_starts_while_buffers_are_produced_only_when_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fsync: bool
) -> None:
    requests: list[tuple[int, int, int]] = []
    produced = 0

    def record(fd: int, offset: int, nbytes: int, flags: int) -> int:
        requests.append((produced, offset, nbytes))
        return 0

    monkeypatch.setattr(writeback, "_sync_file_range", record)

    def produce():  # type: ignore[no-untyped-def]
        nonlocal produced
        for _ in range(6):
            produced += 1
            yield b"x" * (MiB // 2)

    store = LocalShardStore(tmp_path, fsync=fsync)
    assert store.put_streamed("a/c/0", produce()) == 3 * MiB
    if not fsync:
        assert requests == []  # nothing will be fsynced: leave writeback to the kernel
        return
    # every MiB written is handed to the device before the next buffers are produced
    assert requests == [(2, 0, MiB), (4, MiB, MiB), (6, 2 * MiB, MiB)]


def test_batches_hold_back_at_most_their_size_plus_one_buffer() -> None:
    sizes = [3, 1, 4, 1, 5, 9, 2, 6]
    batches = list(batched((bytes(n) for n in sizes), 6))
    assert [[len(b) for b in batch] for batch in batches] == [[3, 1, 4], [1, 5], [9], [2, 6]]
    assert list(batched([], 6)) == []


def test_streamed_buffers_go_to_the_file_in_few_writev_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    real = os.writev

    def counting(fd: int, views: list[memoryview]) -> int:
        calls.append(len(views))
        return real(fd, views)

    monkeypatch.setattr(file_io.os, "writev", counting)
    chunks = [bytes([i]) * (40 << 10) for i in range(20)]  # 20 x 40 KiB, and a CRC each
    buffers = [b for i, chunk in enumerate(chunks) for b in (chunk, i.to_bytes(4, "little"))]
    store = LocalShardStore(tmp_path, fsync=False)
    assert store.put_streamed("a/c/0", iter(buffers)) == sum(len(b) for b in buffers)
    assert (tmp_path / "a" / "c" / "0").read_bytes() == b"".join(buffers)
    assert sum(calls) == len(buffers)
    assert len(calls) <= -(-sum(len(b) for b in buffers) // file_io.WRITE_BATCH)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sync_file_range is Linux's")
def test_sync_file_range_is_found_and_accepted(tmp_path: Path) -> None:
    path = tmp_path / "f"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        os.write(fd, b"y" * MiB)
        assert writeback.start_writeback(fd, 0, MiB)
    finally:
        os.close(fd)


CHILD = """
import sys, time
from shardpipe.storage.local.store import LocalShardStore
store = LocalShardStore(sys.argv[1], fsync=True)
store.put("a/c/0", [b"old"])
def produce():
    for i in range(10_000):
        if i == 3:
            print("streaming", flush=True)
        time.sleep(0.01)
        yield bytes([i % 256]) * 65536
store.put_streamed("a/c/0", produce())
"""


def test_sigkill_mid_stream_leaves_the_old_object_and_a_temporary_file(tmp_path: Path) -> None:
    """kill -9 while a shard streams: the key keeps its old bytes; cleanup removes the rest."""
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "streaming\n"
        time.sleep(0.2)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    store = LocalShardStore(tmp_path)
    assert store.get("a/c/0") == b"old"
    temporary = [p for p in (tmp_path / "a" / "c").iterdir() if p.name != "0"]
    assert len(temporary) == 1 and temporary[0].name.endswith(".shardpipe-tmp")
    assert temporary[0].stat().st_size > 0  # it was killed mid-stream, not before
    assert store.cleanup("a/.shardpipe/staging/x", "a/c") == 1
    assert sorted(p.name for p in (tmp_path / "a" / "c").iterdir()) == ["0"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/fd")
@pytest.mark.parametrize("fsync", [True, False])
def test_metadata_is_fsynced_before_the_first_shard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fsync: bool
) -> None:
    """zarr writes zarr.json without fsync; shardpipe fsyncs it (and the groups' above it)."""
    import dask.array as da

    import shardpipe

    synced: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    root = tmp_path / "root"
    shardpipe.to_sharded_zarr(
        da.ones((8, 8), chunks=4, dtype="uint8"),
        str(root),
        path="g/arr",
        shards=(4, 4),
        chunks=(2, 2),
        storage_options={"fsync": fsync},
    )
    if not fsync:
        assert synced == []
        return
    first_shard = next(i for i, p in enumerate(synced) if "/c/" in p)
    before = synced[:first_shard]
    for path in ["g/arr/zarr.json", "g/arr", "g/zarr.json", "g", "zarr.json"]:
        assert str(root / path) in before
