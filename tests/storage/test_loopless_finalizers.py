"""File systems' finalizers that would fail at exit close on the loop of their clients."""

from __future__ import annotations

import asyncio
import threading
import weakref
from typing import Any

from fsspec.asyn import sync

from shardpipe.internals.zarr_core import loop
from shardpipe.internals.zarr_core import sync as zarr_sync
from shardpipe.storage.loopless_finalizers import _close_loopless


class _FileSystem:
    """Stands for a file system that registers a loopless finalizer, as adlfs does."""

    def __init__(self) -> None:
        self.closed_on: list[Any] = []


async def _close(fs: _FileSystem, *, how: str = "async") -> None:
    fs.closed_on.append((asyncio.get_running_loop(), how))


def _plain_close(fs: _FileSystem) -> None:
    fs.closed_on.append((threading.current_thread().name, "plain"))


async def _fail(fs: _FileSystem) -> None:
    raise OSError("the client is gone already")


def test_loopless_finalizers_close_on_zarrs_loop_and_none_stops_the_others() -> None:
    zarr_sync(asyncio.sleep(0))  # zarr's loop runs, as it does once zarr did any I/O
    file_systems = [_FileSystem() for _ in range(4)]
    closes = [_fail, _close, _plain_close, _close]
    finalizers = [
        weakref.finalize(fs, sync, None, close, fs)
        for fs, close in zip(file_systems, closes, strict=True)
    ]
    keyword = _FileSystem()
    finalizers.append(weakref.finalize(keyword, sync, None, _close, keyword, how="keyword"))  # type: ignore[call-arg]
    with_a_loop = weakref.finalize(file_systems[0], sync, loop[0], _close, file_systems[0])
    _close_loopless()
    assert [f.alive for f in finalizers] == [False] * 5  # none left to raise at exit
    assert with_a_loop.alive  # a finalizer with a loop is left as it is
    with_a_loop.detach()
    assert file_systems[0].closed_on == []  # its close failed: the others still closed
    assert file_systems[1].closed_on == [(loop[0], "async")]
    assert file_systems[2].closed_on == [(threading.current_thread().name, "plain")]
    assert file_systems[3].closed_on == [(loop[0], "async")]
    assert keyword.closed_on == [(loop[0], "keyword")]
