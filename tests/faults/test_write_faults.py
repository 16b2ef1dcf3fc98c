"""Faults injected into writes: flaky storage, short writes, full disks, kills, lost workers.

After each, the invariant: either the array verifies clean and equals the
source, or the error is a clear ``ShardpipeError`` and no shard key holds
partial data; in both cases no staging data or temporary file is left.
"""

from __future__ import annotations

import errno
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np
import pytest
import zarr

import shardpipe
from shardpipe.errors import StorageFullError, TransientStorageError
from shardpipe.storage.local.store import LocalShardStore
from shardpipe.storage.resolve import ResolvedStore
from shardpipe.storage.retry import RetryingStore, RetryPolicy
from shardpipe.testing.faults import FaultyStore
from shardpipe.write.prepare import prepare_write
from tests.support import REPOSITORY
from tests.support.fork_server import ForkServer, wait_for_word
from tests.support.readers import assert_same, read_tensorstore, read_zarr

FAST = RetryPolicy(attempts=12, first_delay=0.001, max_delay=0.01)

INJECTED: Counter[str] = Counter()
"""Faults injected by this module's tests (printed by the last test, for the README)."""


@pytest.fixture(scope="module", autouse=True)
def _print_injected() -> Iterator[None]:
    """Print what this module injected (seen with ``pytest -s``), for the README's figures."""
    yield
    injected = dict(sorted(INJECTED.items()))
    print(f"\nfaults injected by tests/faults/test_write_faults.py: {injected}")


@pytest.fixture(autouse=True)
def _threads() -> Iterator[None]:
    with dask.config.set(scheduler="threads"):
        yield


def _data(shape: tuple[int, ...] = (64, 96, 80), seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    values = rng.integers(0, 1000, shape).astype("uint16")
    values[:16] = 0  # some empty inner chunks and shards
    return values


def _faulty_target(path: Path, **faults: Any) -> tuple[ResolvedStore, FaultyStore]:
    faulty = FaultyStore(LocalShardStore(path), **faults)
    store = zarr.storage.LocalStore(path, read_only=False)
    return ResolvedStore(store, RetryingStore(faulty, FAST, sleep=lambda s: None), ""), faulty


def _leftovers(path: Path) -> list[str]:
    """Staging data, temporary files and undo records under ``path``."""
    return sorted(
        p.relative_to(path).as_posix()
        for p in path.rglob("*")
        if p.is_file()
        and (
            ".shardpipe/staging" in p.as_posix()
            or ".shardpipe/undo" in p.as_posix()
            or p.name.endswith(".shardpipe-tmp")
            or p.name == "job.json"
        )
    )


PARTS: dict[str, Any] = dict(shards=(32, 48, 40), chunks=(8, 16, 20), max_mem=100_000)
"""A layout whose shards are written in parts from (8, 48, 40) blocks."""


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(
    ("blocks", "layout"),
    [
        ((16, 48, 40), dict(shards=(16, 48, 40), chunks=(16, 16, 20))),
        ((20, 30, 50), dict(shards=(16, 48, 40), chunks=(16, 16, 20))),
        ((8, 48, 40), PARTS),
    ],
    ids=["aligned", "misaligned", "parts"],
)
def test_flaky_storage_write_is_correct(
    tmp_path: Path, seed: int, blocks: tuple[int, ...], layout: dict[str, Any]
) -> None:
    data = _data(seed=seed)
    target, faulty = _faulty_target(tmp_path, share=0.2, seed=seed)
    job = prepare_write(
        da.from_array(data, chunks=blocks),
        target,
        index_location="start" if seed % 2 else "end",
        **layout,
    )
    if blocks == (8, 48, 40):
        assert job.plan.n_multipart_shards == job.plan.n_shards
    report = job.execute()
    INJECTED.update(faulty.injected)
    # every fault injected into a task's call is one retry of that task
    assert report.retries <= sum(faulty.injected.values())
    assert_same(read_zarr(str(tmp_path)), data)
    assert_same(read_tensorstore(str(tmp_path)), data)
    assert shardpipe.verify(str(tmp_path)).ok
    assert _leftovers(tmp_path) == []


def test_retries_are_counted_in_the_report(tmp_path: Path) -> None:
    # every third put fails once: 24 shard publishes by the tasks, and three puts by
    # the client (the job marker, the job record, the record's last state)
    target, faulty = _faulty_target(tmp_path, every=3, calls=frozenset({"put"}))
    data = _data()
    report = prepare_write(
        da.from_array(data, chunks=(8, 48, 40)), target, shards=(8, 48, 40), chunks=(8, 16, 20)
    ).execute()
    injected = faulty.injected["transient"]
    assert injected >= 8
    assert injected - 3 <= report.retries <= injected  # the client's own retries are not tasks'
    assert_same(read_zarr(str(tmp_path)), data)


def test_updates_on_flaky_storage(tmp_path: Path) -> None:
    data = _data(seed=7)
    shardpipe.to_sharded_zarr(data, str(tmp_path), shards=(32, 48, 40), chunks=(16, 16, 20))
    expected = data.copy()
    for k, strategy in enumerate(["in_place", "append", "rewrite", "auto"]):
        target, faulty = _faulty_target(tmp_path, share=0.2, seed=100 + k)
        region = (slice(5 + k, 40 + k), slice(10, 70), slice(3, 61))
        values = _data(tuple(s.stop - s.start for s in region), seed=200 + k)
        expected[region] = values
        prepare_write(
            da.from_array(values, chunks=(16, 20, 29)),
            target,
            region=region,
            write_strategy=strategy,
        ).execute()
        INJECTED.update(faulty.injected)
        assert sum(faulty.injected.values()) > 0
        assert_same(read_zarr(str(tmp_path)), expected)
        assert shardpipe.verify(str(tmp_path)).ok, strategy
        assert _leftovers(tmp_path) == []


def test_retries_give_up_with_a_clear_error(tmp_path: Path) -> None:
    target, _ = _faulty_target(
        tmp_path, share=1.0, kinds=("transient",), calls=frozenset({"write_part"})
    )
    with pytest.raises(TransientStorageError, match=r"still failed after 12 tries"):
        shardpipe.to_sharded_zarr(da.from_array(_data(), chunks=(8, 48, 40)), target, **PARTS)
    assert [p.name for p in tmp_path.glob("c/**/*") if p.is_file()] == []
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize(
    "layout", [dict(shards=(16, 48, 40), chunks=(8, 16, 20)), PARTS], ids=["whole", "parts"]
)
def test_full_disk_is_reported_then_resumed(tmp_path: Path, layout: dict[str, Any]) -> None:
    data = _data()
    source = da.from_array(data, chunks=(8, 48, 40))
    target, faulty = _faulty_target(tmp_path, share=0.0, full_after=9)
    with pytest.raises(StorageFullError) as caught:
        prepare_write(source, target, **layout).execute()
    message = str(caught.value)
    assert "ENOSPC" in message and "resume=True" in message
    assert "c/" in message  # names the shard (or part) being written
    assert any("resume=True" in note for note in caught.value.__notes__)
    INJECTED.update(faulty.injected)
    report = shardpipe.verify(str(tmp_path))
    assert report.ok  # no shard key holds partial data
    present = report.shards_present
    assert 0 < present < report.n_shards
    assert _leftovers(tmp_path) == []
    # space is back: the same write carries on
    resumed = prepare_write(source, str(tmp_path), resume=True, **layout)
    assert len(resumed.skip) == present
    report_after = resumed.execute()
    assert report_after.shards_skipped == present
    assert_same(read_zarr(str(tmp_path)), data)
    assert shardpipe.verify(str(tmp_path), complete=True).ok


def test_short_and_interrupted_os_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(5)
    real_writev = os.writev
    seen: Counter[str] = Counter()

    def flaky_writev(fd: int, buffers: Any) -> int:
        joined = b"".join(memoryview(b).cast("B") for b in buffers)
        draw = rng.random()
        if draw < 0.15 and len(joined) > 1:
            seen["short"] += 1  # the kernel may write less than asked
            return real_writev(fd, [joined[: len(joined) // 2]])
        if draw < 0.2:
            seen["EAGAIN"] += 1
            raise OSError(errno.EAGAIN, "injected: resource temporarily unavailable")
        return real_writev(fd, [joined])

    data = _data()
    monkeypatch.setattr(os, "writev", flaky_writev)
    shardpipe.to_sharded_zarr(da.from_array(data, chunks=(8, 48, 40)), str(tmp_path), **PARTS)
    monkeypatch.undo()
    INJECTED.update({f"os.writev {k}": n for k, n in seen.items()})
    assert seen["short"] > 0 and seen["EAGAIN"] > 0
    assert_same(read_zarr(str(tmp_path)), data)
    assert shardpipe.verify(str(tmp_path)).ok
    assert _leftovers(tmp_path) == []


def _mount_tmpfs(where: Path, size: str) -> bool:
    where.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
        capture_output=True,
    )
    return done.returncode == 0


@pytest.mark.skipif(sys.platform != "linux", reason="mounts a Linux tmpfs")
def test_real_full_tmpfs(tmp_path: Path) -> None:
    where = tmp_path / "small"
    if not _mount_tmpfs(where, "1m"):
        pytest.skip("cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN)")
    try:
        data = np.random.default_rng(1).integers(0, 2**16, (64, 128, 128)).astype("uint16")
        source = da.from_array(data, chunks=(32, 64, 64))
        kwargs: dict[str, Any] = dict(shards=(32, 64, 64), chunks=(16, 32, 32))
        with pytest.raises(StorageFullError, match="ENOSPC"):
            shardpipe.to_sharded_zarr(source, str(where / "a.zarr"), **kwargs)
        INJECTED["tmpfs ENOSPC"] += 1
        assert shardpipe.verify(str(where / "a.zarr")).ok
        assert _leftovers(where / "a.zarr") == []
        subprocess.run(["mount", "-o", "remount,size=32m", str(where)], check=True)
        shardpipe.to_sharded_zarr(source, str(where / "a.zarr"), resume=True, **kwargs)
        assert_same(read_zarr(str(where / "a.zarr")), data)
        assert shardpipe.verify(str(where / "a.zarr"), complete=True).ok
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _files(folder: Path) -> int:
    """Files under ``folder`` at their keys (temporary files start with a dot)."""
    return sum(1 for p in folder.rglob("*") if p.is_file() and not p.name.startswith("."))


def _kill_child(
    server: ForkServer,
    target: Path,
    progress: Path,
    delay: float,
    *what: str,
    after: tuple[str, int] = ("c", 0),
) -> bool:
    """Start ``tests.support.resume_child`` on ``target``, SIGKILL it ``delay`` s after it
    started writing, once ``after = (folder, n)``: n files are under that folder of
    the array; return whether it had finished by then."""
    proc = server.start(
        "tests.support.resume_child", [str(target), str(progress), *what], cwd=REPOSITORY
    )
    try:
        wait_for_word(progress, "started", proc)
        deadline = time.monotonic() + 60
        while after[1]:
            ended = proc.poll() is not None  # before the count: a child may end in between
            if _files(target / after[0]) >= after[1]:
                break
            assert not ended and time.monotonic() < deadline
            time.sleep(0.005)
        time.sleep(delay)
        proc.kill()
        proc.wait()
    finally:
        proc.kill()
        proc.wait()
    return "done" in progress.read_text()


@pytest.mark.parametrize("run", [*range(5), "after 3 shards"])
def test_sigkill_then_resume(tmp_path: Path, run: int | str, fork_server: ForkServer) -> None:
    from tests.support.resume_child import source

    target = tmp_path / "a.zarr"
    if isinstance(run, int):
        delay, after = random.Random(run).uniform(0.05, 2.5), 0
    else:
        delay, after = 0.0, 3
    finished = _kill_child(fork_server, target, tmp_path / "progress", delay, after=("c", after))
    INJECTED["SIGKILL"] += 1
    # whatever the kill left, no shard is torn
    before = shardpipe.verify(str(target)) if (target / "zarr.json").exists() else None
    assert before is None or before.ok
    INJECTED["SIGKILL left staging"] += bool(_leftovers(target))
    arr, kwargs = source()
    job = prepare_write(arr, str(target), resume=True, **kwargs)
    INJECTED["SIGKILL shards kept by resume"] += len(job.skip)
    INJECTED["SIGKILL shards written by resume"] += job.plan.n_shards - len(job.skip)
    assert len(job.skip) >= after  # every shard published before the kill is kept
    report = job.execute()
    assert report.shards_skipped == len(job.skip)
    if finished:
        assert report.shards_written == 0
    assert_same(read_zarr(str(target)), arr.compute())
    assert shardpipe.verify(str(target), complete=True).ok
    assert _leftovers(target) == []
    record = json.loads((target / ".shardpipe/write.json").read_bytes())
    assert record["state"] == "complete"


@pytest.mark.parametrize("run", [*range(3), "after 2 finished shards"])
def test_sigkill_during_an_update_then_resume(
    tmp_path: Path, run: int | str, fork_server: ForkServer
) -> None:
    from tests.support.resume_child import REGION, source, update

    target = tmp_path / "a.zarr"
    arr, kwargs = source()
    shardpipe.to_sharded_zarr(arr, str(target), **kwargs)
    expected = arr.compute()
    expected[REGION] = update().compute()
    if isinstance(run, int):
        delay, after = random.Random(100 + run).uniform(0.3, 1.0), 0
    else:
        delay, after = 0.0, 2
    _kill_child(
        fork_server,
        target,
        tmp_path / "progress",
        delay,
        "update",
        after=(".shardpipe/done", after),
    )
    INJECTED["SIGKILL during update"] += 1
    job = prepare_write(update(), str(target), region=REGION, max_mem="64MB", resume=True)
    assert len(job.skip) >= after  # every shard recorded as finished is kept
    INJECTED["update shards kept by resume"] += len(job.skip)
    INJECTED["update shards redone by resume"] += job.plan.n_shards - len(job.skip)
    report = job.execute()
    assert report.shards_skipped == len(job.skip)
    assert_same(read_zarr(str(target)), expected)
    assert shardpipe.verify(str(target), complete=True).ok
    assert _leftovers(target) == []
    assert not [p for p in (target / ".shardpipe").glob("done/**/*") if p.is_file()]


def test_update_stopped_by_a_full_disk_resumes(tmp_path: Path) -> None:
    data = _data()
    shardpipe.to_sharded_zarr(data, str(tmp_path), shards=(16, 48, 40), chunks=(8, 16, 20))
    region = (slice(3, 60), slice(0, 96), slice(5, 75))
    values = _data(tuple(s.stop - s.start for s in region), seed=9)
    source = da.from_array(values, chunks=(16, 48, 35))
    target, _ = _faulty_target(tmp_path, share=0.0, full_after=12)
    with pytest.raises(StorageFullError):
        prepare_write(source, target, region=region).execute()
    assert shardpipe.verify(str(tmp_path)).ok  # torn shards were rolled back
    job = prepare_write(source, str(tmp_path), region=region, resume=True)
    assert 0 < len(job.skip) < job.plan.n_shards
    job.execute()
    data[region] = values
    assert_same(read_zarr(str(tmp_path)), data)
    assert shardpipe.verify(str(tmp_path), complete=True).ok
    assert _leftovers(tmp_path) == []


def _wait_for_a_worker_in_place_of(client: Any, killed: str) -> None:
    """Wait until the cluster has two workers again, the one at ``killed`` not among them."""
    deadline = time.monotonic() + 120
    while True:
        workers = set(client.ncores())  # asks the scheduler (see test_verify_runs_on_the_cluster)
        if len(workers) == 2 and killed not in workers:
            return
        assert time.monotonic() < deadline, f"no new worker in place of {killed}: {workers}"
        time.sleep(0.1)


def _computed_here(keys: list[str], dask_worker: Any) -> list[str]:
    """Which of ``keys`` this worker computed and holds (not fetched from another)."""
    return [
        str(key)
        for key, task in dask_worker.state.tasks.items()
        if str(key) in keys
        and task.state == "memory"
        and any(step["action"] == "compute" for step in task.startstops)
    ]


@pytest.mark.cluster
@pytest.mark.parametrize("victim", ["metadata holder", "other"])
def test_worker_killed_mid_write(tmp_path: Path, victim: str, cluster_client: Any) -> None:
    """Kill a worker mid-write: the one that computed the array-creating task (Dask runs
    it again unless the other fetched its result already) or the other one. The
    session's cluster: its nanny starts a new worker in place of the killed one, which
    the test waits for."""

    def slow(block: np.ndarray) -> np.ndarray:
        time.sleep(0.15)
        return block

    client = cluster_client
    data = _data((96, 96, 80), seed=3)
    source = da.from_array(data, chunks=(16, 48, 40)).map_blocks(slow, dtype=data.dtype)
    pids = client.run(os.getpid)
    job = prepare_write(source, str(tmp_path), **PARTS)
    delayed = job.to_delayed()
    creating = {str(k) for k in delayed.dask if "create-array" in str(k)}  # this job's
    assert creating
    running = client.compute(delayed)
    deadline = time.monotonic() + 60
    holder: str | None = None
    while holder is None and time.monotonic() < deadline:
        # the worker that computed it: the other may soon hold a copy (fetched for a shard)
        computed = client.run(_computed_here, sorted(creating))
        holder = next((worker for worker, keys in computed.items() if keys), None)
        time.sleep(0.02)
    assert holder is not None, "the create-array task never finished"
    address = holder if victim == "metadata holder" else next(a for a in pids if a != holder)
    os.kill(pids[address], signal.SIGKILL)
    INJECTED["worker SIGKILL"] += 1
    try:
        report = running.result(timeout=120)
    finally:  # the tests after this one find two workers again
        _wait_for_a_worker_in_place_of(client, address)
    assert report.shards > 0
    assert_same(read_zarr(str(tmp_path)), data)
    assert shardpipe.verify(str(tmp_path), complete=True).ok
    assert _leftovers(tmp_path) == []
