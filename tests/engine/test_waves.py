"""Writes run in waves: correct data, bounded graphs, two batches at most, resume by wave."""

from __future__ import annotations

import json
import multiprocessing
import multiprocessing.pool
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import dask.callbacks
import numpy as np
import pytest
from dask.delayed import delayed

import shardpipe
import shardpipe.engine.encoders as encoders
from shardpipe.engine.reports import WriteReport
from shardpipe.engine.streaming import WaveGraph, run_waves
from shardpipe.write.prepare import prepare_write
from tests.support.readers import assert_same, read_tensorstore, read_zarr

SHAPE = (96, 80, 60)
LAYOUT = dict(shards=(16, 40, 30), chunks=(8, 20, 15))  # 6 x 2 x 2 = 24 shards


def _data(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 1000, SHAPE, dtype=np.uint16)


@pytest.fixture
def small_waves() -> Iterator[None]:
    with dask.config.set({"shardpipe.wave-tasks": 5, "scheduler": "threads"}):
        yield


@pytest.mark.parametrize("blocks", [(16, 40, 30), (10, 33, 17), (96, 80, 60)])
def test_a_write_in_waves_reads_back_equal(tmp_path: Path, small_waves: None, blocks) -> None:
    data = _data()
    job = prepare_write(da.from_array(data, blocks), str(tmp_path), **LAYOUT)
    schedule = job.wave_schedule()
    assert schedule.n_waves > 1  # the test is about waves
    assert "waves" in repr(job) and f"{schedule.n_waves:,} of up to" in repr(job)
    report = job.execute()
    assert report.shards == 24
    assert_same(read_zarr(str(tmp_path)), data)
    assert_same(read_tensorstore(str(tmp_path)), data)
    record = json.loads((tmp_path / ".shardpipe" / "write.json").read_text())
    assert record["state"] == "complete"


def test_each_wave_computes_only_the_blocks_feeding_it(tmp_path: Path, small_waves: None) -> None:
    data = _data()
    seen: list[tuple[int, ...]] = []
    lock = threading.Lock()

    def record(block: np.ndarray, block_info=None) -> np.ndarray:
        with lock:
            seen.append(tuple(block_info[0]["chunk-location"]))
        return block

    source = da.from_array(data, (16, 40, 30)).map_blocks(record, dtype=data.dtype)
    job = prepare_write(source, str(tmp_path), **LAYOUT)
    assert job.wave_schedule().n_waves > 1
    job.execute()
    assert sorted(seen) == sorted(np.ndindex(*source.numblocks))  # aligned: each block once
    assert_same(read_zarr(str(tmp_path)), data)


def test_a_write_in_waves_on_a_cluster(tmp_path: Path, cluster_client) -> None:
    data = _data(3)
    with dask.config.set({"shardpipe.wave-tasks": 8}):
        job = prepare_write(da.from_array(data, (10, 33, 17)), str(tmp_path), **LAYOUT)
        assert job.wave_schedule(threads=2).n_waves > 1
        report = job.execute(progress=True)
    assert report.shards == 24
    assert_same(read_zarr(str(tmp_path)), data)


def _wave(job: int, number: int, log: list, lock, seconds: float, fail: bool = False) -> WaveGraph:
    def publish(i: int) -> WriteReport:
        with lock:
            log.append(("start", number, i, time.monotonic()))
        time.sleep(seconds)
        if fail:
            raise RuntimeError(f"wave {number} fails")
        with lock:
            log.append(("end", number, i, time.monotonic()))
        return WriteReport(shards=1, nbytes=10)

    tasks = [
        delayed(publish, pure=False)(i, dask_key_name=f"write-shard-tok-{number}-{i}")
        for i in range(3)
    ]
    return WaveGraph(job, number, tasks, n_tasks=3)


def test_at_most_two_batches_run_at_once_and_waves_finish_in_order() -> None:
    log: list = []
    lock = threading.Lock()
    done: list[int] = []
    with dask.config.set({"shardpipe.wave-tasks": 3, "scheduler": "threads", "num_workers": 4}):
        totals = run_waves(
            (_wave(0, k, log, lock, 0.02) for k in range(8)),
            1,
            show=False,
            token="tok",
            total_shards=24,
            total_waves=8,
            on_wave_done=lambda w: done.append(w.wave),
        )
    assert totals == [WriteReport(shards=24, nbytes=240)]
    assert done == list(range(8))
    for kind, number, _, when in log:
        if kind == "start" and number >= 2:  # wave k+2 starts after wave k has ended
            ends = [t for k, n, _, t in log if k == "end" and n == number - 2]
            assert len(ends) == 3 and max(ends) <= when


def test_a_failing_wave_stops_the_run_and_nothing_runs_after(small_waves: None) -> None:
    log: list = []
    lock = threading.Lock()
    waves = [_wave(0, k, log, lock, 0.05, fail=(k == 1)) for k in range(6)]
    with pytest.raises(RuntimeError, match="wave 1 fails"):
        run_waves(iter(waves), 1, show=False, token="tok", total_shards=18, total_waves=6)
    finished_at = time.monotonic()
    assert all(t <= finished_at for *_, t in log)
    # wave 0 alone, then batches of two waves (5 tasks or more): {1, 2} fails while
    # {3, 4} is in flight; wave 5 is never submitted
    assert not any(number >= 5 for _, number, _, _ in log)
    time.sleep(0.2)
    assert all(t <= finished_at for *_, t in log)  # nothing ran after the error


def test_resume_starts_at_the_first_wave_not_done(tmp_path: Path, small_waves: None) -> None:
    data = _data(5)
    calls = {"n": 0}

    def failing(block: np.ndarray, block_info=None) -> np.ndarray:
        if block_info[0]["chunk-location"][0] >= 3:  # shards of rows 3-5 fail
            raise OSError("source unavailable")
        return block

    source = da.from_array(data, (16, 40, 30))
    with pytest.raises(OSError, match="source unavailable"):
        bad = source.map_blocks(failing, dtype=data.dtype)
        shardpipe.to_sharded_zarr(bad, str(tmp_path), **LAYOUT)
    record = json.loads((tmp_path / ".shardpipe" / "write.json").read_text())
    assert record["state"] == "running"
    done = record["waves"]["done"]
    assert done >= 1

    def counting(block: np.ndarray) -> np.ndarray:
        calls["n"] += block.size > 0  # not dask's call on an empty meta array
        return block

    good = source.map_blocks(counting, dtype=data.dtype)
    job = prepare_write(good, str(tmp_path), resume="force", **LAYOUT)
    assert job.first_wave == done
    report = job.execute()
    schedule = job.wave_schedule()
    assert report.shards_skipped >= sum(schedule.wave(k).n_shards for k in range(done))
    assert report.shards + report.shards_skipped == 24
    assert calls["n"] == 24 - report.shards_skipped  # aligned: one block per shard written
    assert_same(read_zarr(str(tmp_path)), data)


def test_a_petabyte_write_publishes_its_first_shards_at_once(tmp_path: Path) -> None:
    """1 PB of uint8 in 2 MiB shards (512 million): the client plans and starts in moments.

    Planning or graph building that walked every shard or block would take
    hours here; the write is stopped by its source after a few blocks.
    """
    n = 102_400
    produced = {"blocks": 0}
    lock = threading.Lock()

    def block(zeros: np.ndarray) -> np.ndarray:
        with lock:
            produced["blocks"] += 1
            if produced["blocks"] > 24:
                raise RuntimeError("enough")
        return zeros + 7

    source = da.zeros((n,) * 3, chunks=128, dtype=np.uint8).map_blocks(block, dtype=np.uint8)
    assert source.nbytes > 10**15
    with dask.config.set(scheduler="threads"), pytest.raises(RuntimeError, match="enough"):
        shardpipe.to_sharded_zarr(
            source, str(tmp_path), shards=(128, 128, 128), chunks=(64, 64, 64), max_mem="64MiB"
        )
    shards = [p for p in (tmp_path / "c").rglob("*") if p.is_file()]
    assert 1 <= len(shards) <= 24
    record = json.loads((tmp_path / ".shardpipe" / "write.json").read_text())
    assert record["state"] == "running"


def _slow_publish(path: str) -> WriteReport:
    time.sleep(1.5)
    with open(path, "w") as out:
        out.write("done")
    return WriteReport(shards=1)


def _failing_publish() -> WriteReport:
    time.sleep(0.2)
    raise RuntimeError("injected on a worker")


def test_on_a_cluster_a_failure_waits_for_running_tasks(tmp_path: Path, cluster_client) -> None:
    """A cancelled task keeps running on its worker: the error waits for it to end."""
    marker = tmp_path / "slow-done"
    tasks = [
        delayed(_slow_publish, pure=False)(str(marker), dask_key_name="write-shard-tokc-0"),
        delayed(_failing_publish, pure=False)(dask_key_name="write-shard-tokc-1"),
    ]
    wave = WaveGraph(0, 0, tasks, n_tasks=2)
    with pytest.raises(RuntimeError, match="injected on a worker"):
        run_waves([wave], 1, show=False, token="tokc", total_shards=2, total_waves=1)
    assert marker.exists()  # the slow task had ended before the error was raised


def _process_pool() -> ProcessPoolExecutor:
    return ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("fork"))


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
@pytest.mark.parametrize(
    "make_pool",
    [_process_pool, lambda: multiprocessing.pool.ThreadPool(2)],
    ids=["ProcessPoolExecutor", "multiprocessing.pool.ThreadPool"],
)
def test_on_processes_a_failure_waits_for_running_tasks(
    tmp_path: Path, make_pool: Callable[[], Any]
) -> None:
    """``scheduler="processes"`` on a pool of the config, which Dask leaves running: the error
    waits for the tasks handed to it to end (issue 39)."""
    marker = tmp_path / "slow-done"
    tasks = [
        delayed(_slow_publish, pure=False)(str(marker), dask_key_name="write-shard-tokp-0"),
        delayed(_failing_publish, pure=False)(dask_key_name="write-shard-tokp-1"),
    ]
    wave = WaveGraph(0, 0, tasks, n_tasks=2)
    pool = make_pool()
    try:
        # chunksize 1: each task handed to the pool alone, so that both run at once
        with (
            dask.config.set(scheduler="processes", pool=pool, chunksize=1),
            pytest.raises(RuntimeError, match="injected on a worker"),
        ):
            run_waves([wave], 1, show=False, token="tokp", total_shards=2, total_waves=1)
        assert marker.exists()  # the slow task had ended before the error was raised
    finally:
        if isinstance(pool, ProcessPoolExecutor):
            pool.shutdown()
        else:
            pool.terminate()


class _HandedOn(dask.callbacks.Callback):
    """Most tasks handed to the pool and not finished at once (``pretask`` fires at hand-off)."""

    def __init__(self) -> None:
        super().__init__()
        self.now = self.most = 0
        self.lock = threading.Lock()

    def _pretask(self, key: object, dsk: object, state: object) -> None:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)

    def _posttask(self, key: object, result: object, dsk: object, state: object, id: int) -> None:
        with self.lock:
            self.now -= 1


def _slow_report(*_: object) -> WriteReport:
    time.sleep(0.01)
    return WriteReport(shards=1)


@pytest.mark.parametrize("stamped", [False, True], ids=["shard tasks alone", "parts and stamps"])
def test_shard_tasks_alone_are_queued_two_per_thread(stamped: bool) -> None:
    # queued tasks keep each thread busy between two shard tasks; where a task must wait
    # for others (a stamp for its parts), none is queued ahead of it
    target = delayed(lambda: "target", pure=False)()
    if stamped:
        parts = [delayed(_slow_report, pure=False)(target, k) for k in range(8)]
        pairs = zip(parts[::2], parts[1::2], strict=True)
        tasks = [delayed(_slow_report, pure=False)(a, b) for a, b in pairs]
    else:
        tasks = [delayed(_slow_report, pure=False)(target, k) for k in range(8)]
    wave = WaveGraph(0, 0, tasks, len(tasks))
    handed = _HandedOn()
    with dask.config.set({"scheduler": "threads", "num_workers": 2}), handed:
        totals = run_waves([wave], 1, show=False, token="tok", total_shards=4, total_waves=1)
    assert totals == [WriteReport(shards=len(tasks))]
    assert handed.most == (2 if stamped else 4)


def test_tasks_handed_to_the_pool_count_as_busy_until_done() -> None:
    # a shard task sees the tasks queued behind it: their cores are not idle, so it
    # hands no chunk to the encoding pool (shardpipe.engine.encoders.busy_threads)
    seen: list[int] = []

    def report(*_: object) -> WriteReport:
        time.sleep(0.02)  # the scheduler has refilled the queue by now
        seen.append(encoders.busy_threads()())
        return WriteReport(shards=1)

    target = delayed(lambda: "target", pure=False)()
    tasks = [delayed(report, pure=False)(target, k) for k in range(8)]
    with dask.config.set({"scheduler": "threads", "num_workers": 2}):
        run_waves(
            [WaveGraph(0, 0, tasks, 8)], 1, show=False, token="tok", total_shards=8, total_waves=1
        )
    assert len(seen) == 8
    assert max(seen) == 4  # two running, two queued
    assert encoders.busy_threads()() == 0  # every hand-off counted off once done
