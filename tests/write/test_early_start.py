"""A new array's write computes its blocks while its marker and metadata are written.

The start (marker, job record, ``zarr.json``) runs on a thread of its own;
the tasks' store waits for it (:mod:`shardpipe.storage.gated`). These tests
slow the start down through a recording store and check that blocks were
computed meanwhile, that no shard reached the store before ``zarr.json``,
and that a start that fails leaves nothing behind.
"""

from __future__ import annotations

import pickle
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np
import pytest
import zarr

from shardpipe.errors import ArrayExistsError
from shardpipe.storage.delegating import DelegatingStore
from shardpipe.storage.gated import GatedStore
from shardpipe.storage.local.store import LocalShardStore
from shardpipe.storage.resolve import ResolvedStore
from shardpipe.write.prepare import prepare_write
from tests.support.readers import assert_same, read_zarr

LAYOUT: dict[str, Any] = dict(shards=(16, 32, 32), chunks=(8, 16, 16))
SLOW_START = 0.4
"""Seconds the recording store holds the marker's put: the start's slow round trip."""


class RecordingStore(DelegatingStore):
    """Logs when each call began and ended; the marker's put takes :data:`SLOW_START`."""

    def __init__(self, inner: LocalShardStore) -> None:
        super().__init__(inner)
        self.calls: list[tuple[str, str, float, float]] = []
        self._lock = threading.Lock()

    def _forward[T](self, method: str, call: Callable[[], T]) -> T:
        began = time.monotonic()
        try:
            return call()
        finally:
            key = getattr(call, "key", "")
            with self._lock:
                self.calls.append((method, key, began, time.monotonic()))

    def put(self, key: str, buffers: Any, **conditions: Any) -> None:
        if key.endswith("job.json"):
            time.sleep(SLOW_START)
        began = time.monotonic()
        self.inner.put(key, buffers, **conditions)
        with self._lock:
            self.calls.append(("put", key, began, time.monotonic()))

    def put_streamed(self, key: str, buffers: Any) -> int:
        began = time.monotonic()
        nbytes = self.inner.put_streamed(key, buffers)
        with self._lock:
            self.calls.append(("put_streamed", key, began, time.monotonic()))
        return nbytes


def _target(path: Path) -> tuple[ResolvedStore, RecordingStore]:
    recording = RecordingStore(LocalShardStore(path))
    return ResolvedStore(zarr.storage.LocalStore(path), recording, ""), recording


def _source(data: np.ndarray, computed: list[float]) -> da.Array:
    def block(x: np.ndarray) -> np.ndarray:
        computed.append(time.monotonic())
        return x

    return da.from_array(data, chunks=(16, 32, 32)).map_blocks(block, dtype=data.dtype)


def _data() -> np.ndarray:
    return np.random.default_rng(0).integers(0, 1000, (32, 64, 64)).astype("uint16")


@pytest.mark.parametrize("scheduler", ["threads", "sync"])
def test_blocks_are_computed_while_the_start_writes(tmp_path: Path, scheduler: str) -> None:
    data, computed = _data(), []
    target, recording = _target(tmp_path)
    job = prepare_write(_source(data, computed), target, **LAYOUT)
    with dask.config.set(scheduler=scheduler):
        job.execute()
    assert_same(read_zarr(tmp_path), data)
    puts = [(key, began, ended) for method, key, began, ended in recording.calls if "put" in method]
    marker_ended = next(ended for key, _, ended in puts if key.endswith("job.json"))
    metadata_ended = next(ended for key, _, ended in puts if key == "zarr.json")
    shards = [began for key, began, _ in puts if key.startswith("c/")]
    assert len(shards) == 8
    # encoding did not wait for the start ...
    assert min(computed) < marker_ended
    # ... and no shard reached the store before the array's zarr.json
    assert min(shards) >= metadata_ended


def test_a_start_that_fails_writes_nothing(tmp_path: Path) -> None:
    data, computed = _data(), []
    target, recording = _target(tmp_path)
    job = prepare_write(_source(data, computed), target, **LAYOUT)
    # another writer makes the array between the plan and the run
    other = zarr.create_array(tmp_path, shape=(4,), dtype="uint8")
    other[:] = 7
    with pytest.raises(ArrayExistsError):
        job.execute()
    assert not [key for _, key, _, _ in recording.calls if key.startswith("c/")]
    assert [p.relative_to(tmp_path).as_posix() for p in (tmp_path / "c").rglob("*")] == ["c/0"]
    assert not (tmp_path / ".shardpipe" / "job.json").exists()  # the marker was let go
    np.testing.assert_array_equal(zarr.open_array(tmp_path)[:], np.full(4, 7, "uint8"))


def test_a_gated_store_waits_for_its_gate_and_raises_its_error(tmp_path: Path) -> None:
    gate: Future[None] = Future()
    store = GatedStore(LocalShardStore(tmp_path), gate)
    finished: list[bytes | None] = []
    reader = threading.Thread(target=lambda: finished.append(store.get("a")))
    reader.start()
    reader.join(0.2)
    assert reader.is_alive() and not finished  # waiting for the gate
    gate.set_result(None)
    reader.join(5)
    assert finished == [None]

    failed: Future[None] = Future()
    failed.set_exception(ArrayExistsError("made meanwhile"))
    with pytest.raises(ArrayExistsError, match="made meanwhile"):
        GatedStore(LocalShardStore(tmp_path), failed).put("b", [b"x"])
    assert not (tmp_path / "b").exists()


def test_a_gated_store_stays_in_its_process(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="cannot be sent"):
        pickle.dumps(GatedStore(LocalShardStore(tmp_path), Future()))
