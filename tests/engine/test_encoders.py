"""Encoding one task's chunks on idle cores: same bytes as one thread, bounded by max_mem.

:func:`~shardpipe.engine.encoders.encode_in_order` against a plain loop, and
whole single-shard writes and updates (one task, so cores are idle) against
the same writes with one encoding thread, read back by zarr-python and
tensorstore; the window never exceeds what the plan allows under
``max_mem``, and the traced peak of a write stays under ``max_mem``.
"""

from __future__ import annotations

import sys
import threading
import time
import tracemalloc
import types
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import dask
import dask.array as da
import numpy as np
import pytest
import zarr
from zarr.codecs import ZstdCodec

import shardpipe
import shardpipe.engine.encoders as encoders
import shardpipe.write.spec as spec
from shardpipe.codec.chunk_codec import ChunkCodec
from shardpipe.core.memory import MemoryModel
from tests.support.readers import read_tensorstore

MB = 10**6


class Concurrency:
    """Counts calls running at once, and the threads they ran on."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = 0
        self.most = 0
        self.threads: set[str] = set()

    def __enter__(self) -> None:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
            self.threads.add(threading.current_thread().name)

    def __exit__(self, *exc: object) -> None:
        with self.lock:
            self.now -= 1


def test_results_come_in_order_at_most_a_window_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(encoders, "task_threads", lambda: 8)
    seen = Concurrency()

    def slow_square(n: int) -> int:
        with seen:
            time.sleep(0.002 * (n % 3))  # later jobs often finish first
            return n * n

    with encoders.encoding_task():
        out = list(encoders.encode_in_order(slow_square, range(40), 3))
    assert out == [n * n for n in range(40)]
    assert seen.most == 3
    # the task's own thread encodes its share: the pool's threads are the other two
    task = threading.current_thread().name
    assert task in seen.threads
    pool = seen.threads - {task}
    assert 1 <= len(pool) <= 2
    assert all(name.startswith("shardpipe-encode") for name in pool)


def test_the_cores_are_counted_once_per_task_not_per_chunk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # on a distributed worker asking costs about a microsecond: not for every chunk
    asked = []
    monkeypatch.setattr(encoders, "task_threads", lambda: asked.append(1) or 2)
    with encoders.encoding_task():
        out = list(encoders.encode_in_order(lambda n: n + 1, range(50), 2))
    assert out == list(range(1, 51))
    assert len(asked) == 1


@contextmanager
def _two_cores_busy(kind: str) -> Iterator[None]:
    """Two cores' worth of tasks around the caller's own encoding task."""
    if kind == "running":  # two tasks on two cores
        with encoders.encoding_task(), encoders.encoding_task():
            yield
        return
    # one task runs and another waits in the threaded runner's pool: the thread that
    # ends a task starts it at once
    handed: list[Future[None]] = [Future(), Future()]  # this task's, and one waiting
    for future in handed:
        encoders.count_handed(future)
    try:
        with encoders.encoding_task():
            assert encoders.busy_threads()() == 2
            yield
    finally:
        for future in handed:
            future.set_result(None)


@pytest.mark.parametrize("kind", ["running", "waiting"])
def test_busy_cores_mean_one_chunk_at_a_time_on_the_task_thread(
    monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    monkeypatch.setattr(encoders, "task_threads", lambda: 2)
    seen = Concurrency()

    def square(n: int) -> int:
        with seen:
            return n * n

    with _two_cores_busy(kind):
        out = list(encoders.encode_in_order(square, range(10), 4))
    assert out == [n * n for n in range(10)]
    assert seen.threads == {threading.current_thread().name}
    # done: the other core is idle again, and a task's chunks go to the pool as well
    assert encoders.busy_threads()() == 0
    with encoders.encoding_task():
        assert encoders.window(4, 2, encoders.busy_threads()()) == 2


def test_a_workers_ready_tasks_keep_its_cores_busy(monkeypatch: pytest.MonkeyPatch) -> None:
    class State:
        nthreads = 4
        executing_count = 1
        ready: ClassVar[list[object]] = [object(), object()]  # waiting for a thread

    class Worker:
        state = State()

    fake = types.SimpleNamespace(get_worker=lambda: Worker())
    monkeypatch.setitem(sys.modules, "distributed", fake)
    assert encoders.task_threads() == 4
    busy = encoders.busy_threads()
    assert busy() == 3
    assert encoders.window(8, 4, busy()) == 2  # one core idle
    State.ready = []
    assert busy() == 1  # asked again each chunk
    assert encoders.window(8, 4, busy()) == 4


def test_an_encoding_error_is_raised_at_its_turn_after_the_others_stop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(encoders, "task_threads", lambda: 4)
    seen = Concurrency()

    def fails_at_5(n: int) -> int:
        with seen:
            time.sleep(0.001)
            if n == 5:
                raise ValueError("chunk 5")
            return n

    got: list[int] = []
    with pytest.raises(ValueError, match="chunk 5"):
        for n in encoders.encode_in_order(fails_at_5, range(100), 4):
            got.append(n)
    assert got == [0, 1, 2, 3, 4]
    assert seen.now == 0  # nothing still running once the error is raised


def test_the_window_fits_max_mem() -> None:
    model = MemoryModel(chunk_nbytes=MB, expansion=1.0)
    assert model.working == 3 * MB
    assert model.encoders_within(budget=100 * MB, peak=100 * MB, most=8) == 1
    assert model.encoders_within(budget=100 * MB, peak=94 * MB, most=8) == 3
    assert model.encoders_within(budget=100 * MB, peak=10 * MB, most=8) == 8
    assert model.encoders_within(budget=100 * MB, peak=10 * MB, most=1) == 1


def noisy(shape: tuple[int, ...]) -> np.ndarray:
    rng = np.random.default_rng(7)
    return (1000 + rng.integers(0, 256, size=shape)).astype("uint16")


def shard_files(root: Path) -> dict[str, bytes]:
    files = (root / "c").rglob("*")
    return {str(p.relative_to(root)): p.read_bytes() for p in files if p.is_file()}


def write(
    path: Path, data: np.ndarray, cores: int, monkeypatch: pytest.MonkeyPatch, **kwargs: Any
) -> Concurrency:
    """Write ``data`` as one shard with ``cores`` threads per process; how chunks were encoded."""
    monkeypatch.setattr(encoders, "task_threads", lambda: cores)
    monkeypatch.setattr(spec, "CPU_COUNT", cores)
    seen = Concurrency()
    real = ChunkCodec.encode_scattered

    def counted(self: ChunkCodec, *args: Any) -> Any:
        with seen:
            return real(self, *args)

    monkeypatch.setattr(ChunkCodec, "encode_scattered", counted)
    x = da.from_array(data, chunks=data.shape)
    with dask.config.set(scheduler="threads", num_workers=2):
        shardpipe.to_sharded_zarr(
            x,
            str(path),
            shards=data.shape,
            chunks=(16, 32, 32),
            compressors=[ZstdCodec(level=1)],
            storage_options={"fsync": False},
            **kwargs,
        )
    monkeypatch.setattr(ChunkCodec, "encode_scattered", real)
    return seen


def test_a_single_shard_is_the_same_bytes_on_several_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = noisy((64, 128, 128))  # one shard of 64 chunks
    serial = write(tmp_path / "serial", data, 1, monkeypatch)
    parallel = write(tmp_path / "parallel", data, 4, monkeypatch)
    assert serial.most == 1
    assert parallel.most > 1 and any(t.startswith("shardpipe-encode") for t in parallel.threads)
    assert shard_files(tmp_path / "parallel") == shard_files(tmp_path / "serial")
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "parallel"))[...], data)
    np.testing.assert_array_equal(read_tensorstore(str(tmp_path / "parallel")), data)


def test_a_single_shard_update_is_the_same_bytes_on_several_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = noisy((64, 128, 128))
    new = noisy((32, 128, 128)) + 7
    for name, cores in (("serial", 1), ("parallel", 4)):
        write(tmp_path / name, data, 1, monkeypatch)
        monkeypatch.setattr(encoders, "task_threads", lambda cores=cores: cores)
        monkeypatch.setattr(spec, "CPU_COUNT", cores)
        with dask.config.set(scheduler="threads", num_workers=2):
            shardpipe.to_sharded_zarr(
                da.from_array(new, chunks=new.shape),
                str(tmp_path / name),
                region=(slice(0, 32), slice(None), slice(None)),
                storage_options={"fsync": False},
            )
    assert shard_files(tmp_path / "parallel") == shard_files(tmp_path / "serial")
    expected = data.copy()
    expected[:32] = new
    np.testing.assert_array_equal(read_tensorstore(str(tmp_path / "parallel")), expected)


def test_parallel_encoding_stays_within_max_mem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The window is what max_mem allows, and the traced peak of the write stays under it."""
    data = noisy((64, 256, 256))  # 8 MiB: one shard of 32 chunks of 256 KiB, incompressible
    x = da.from_array(data, chunks=data.shape)
    max_mem = 20 * MB
    options: dict[str, Any] = {"shards": data.shape, "chunks": (32, 64, 64), "max_mem": max_mem}
    plan = shardpipe.prepare_write(x, str(tmp_path / "plan"), **options).plan
    allowed = plan.encoders(8)
    assert 1 < allowed < 8  # room for a few chunks beside the first, not for eight
    assert plan.max_projected_mem + (allowed - 1) * plan.model.working <= max_mem
    monkeypatch.setattr(encoders, "task_threads", lambda: 8)
    monkeypatch.setattr(spec, "CPU_COUNT", 8)
    seen = Concurrency()
    real = ChunkCodec.encode_scattered

    def counted(self: ChunkCodec, *args: Any) -> Any:
        with seen:
            time.sleep(0.002)  # let the window fill
            return real(self, *args)

    monkeypatch.setattr(ChunkCodec, "encode_scattered", counted)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        with dask.config.set(scheduler="threads", num_workers=2):
            shardpipe.to_sharded_zarr(
                x, str(tmp_path / "out"), storage_options={"fsync": False}, **options
            )
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert seen.most == allowed
    assert peak <= max_mem
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "out"))[...], data)
