"""Temporary files say which process writes them; cleanups remove only those left behind.

A file-system backend writes every object to a temporary file beside its key
first. A cleanup (``repair``, ``cleanup``, the next job after a dead one)
removes temporary files that killed processes left, and must never remove
one a live process is still writing: the marker of the next job, say.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

import shardpipe
from shardpipe.storage.local.store import LocalShardStore
from shardpipe.storage.local.temporary import temporary_name


def _dead_pid() -> int:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    return int(done.stdout)


def test_a_live_writers_temporary_file_is_never_removed(tmp_path: Path) -> None:
    """A repair between two jobs used to delete the next job's marker as it was written."""
    path = tmp_path / "a.zarr"
    shardpipe.to_sharded_zarr(np.ones((8, 8), "uint8"), str(path), shards=(4, 4), chunks=(2, 2))
    store = LocalShardStore(path, fsync=False)
    writing, go = threading.Event(), threading.Event()
    failed: list[BaseException] = []

    def slow_marker() -> Iterator[bytes]:
        yield b'{"job": '
        writing.set()
        assert go.wait(30)
        yield b'"x"}'

    def write() -> None:
        try:
            store.put_streamed(".shardpipe/next.json", slow_marker())
        except BaseException as err:
            failed.append(err)

    thread = threading.Thread(target=write)
    thread.start()
    assert writing.wait(10)
    assert shardpipe.repair(str(path)).ok  # cleans up while the write is under way
    go.set()
    thread.join(10)
    assert not failed, failed
    assert (path / ".shardpipe" / "next.json").read_bytes() == b'{"job": "x"}'


def test_only_left_behind_temporary_files_are_removed(tmp_path: Path) -> None:
    path = tmp_path / "a.zarr"
    shardpipe.to_sharded_zarr(np.ones((8, 8), "uint8"), str(path), shards=(4, 4), chunks=(2, 2))
    folder = path / "c" / "0"
    mine = folder / temporary_name("0")
    dead = folder / temporary_name("1").replace(f"-{os.getpid()}@", f"-{_dead_pid()}@")
    older = folder / ".1.abc.shardpipe-tmp"  # named by an older shardpipe
    elsewhere = folder / (mine.name.rsplit("@", 1)[0] + "@00000000.shardpipe-tmp")
    stale_elsewhere = folder / (dead.name.rsplit("@", 1)[0] + "@00000000.shardpipe-tmp")
    for p in (mine, dead, older, elsewhere, stale_elsewhere):
        p.write_bytes(b"partial")
    two_hours_ago = time.time() - 7200
    os.utime(stale_elsewhere, (two_hours_ago, two_hours_ago))
    shardpipe.cleanup(str(path))
    left = sorted(p.name for p in folder.iterdir() if p.name.endswith(".shardpipe-tmp"))
    assert left == sorted([mine.name, elsewhere.name])


def test_zarrs_temporary_file_of_the_arrays_metadata_is_removed(tmp_path: Path) -> None:
    """zarr writes ``zarr.<uuid>.partial`` and renames it: a kill in between leaves it there."""
    path = tmp_path / "g.zarr"
    shardpipe.to_sharded_zarr(
        np.ones((8, 8), "uint8"), str(path), path="a", shards=(4, 4), chunks=(2, 2)
    )
    left = path / "a" / f"zarr.{'0' * 32}.partial"
    in_the_group = path / f"zarr.{'1' * 32}.partial"  # not the array's: left alone
    like_it = path / "a" / "zarr.notes.partial"  # not a name zarr gives
    for p in (left, in_the_group, like_it):
        p.write_bytes(b"{")
    assert shardpipe.cleanup(str(path), "a") == 1
    assert not left.exists() and in_the_group.exists() and like_it.exists()
