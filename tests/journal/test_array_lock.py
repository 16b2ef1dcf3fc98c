"""Taking an array over from a dead job: exactly one taker wins, on every backend.

Two takers found the same stale marker; one of them is held at a step of
the takeover (:mod:`shardpipe.journal.stalls`) while the other takes the
array. Whatever the step, the held one must not take the array from the
live winner: it ends in :class:`~shardpipe.errors.JobConflictError` and the
winner still holds the array. Backends: a file system, a zarr
``MemoryStore``, S3 (moto) and an Icechunk session, which between them use
both ways of taking over (a conditional replace, a claim).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import s3fs
import zarr

from shardpipe.errors import JobConflictError
from shardpipe.journal import stalls as journal_stalls
from shardpipe.journal.array_lock import release, take
from shardpipe.journal.markers import JobKeys, JobMarker, check_held
from shardpipe.storage.base import ShardStore
from shardpipe.storage.local.store import LocalShardStore
from shardpipe.storage.s3.store import S3ShardStore
from shardpipe.storage.zarr_store import ZarrShardStore

KEYS = JobKeys("arr/")


def _dead_pid() -> int:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    return int(done.stdout)


def _dead_marker(job: str) -> JobMarker:
    return JobMarker(job, "update", socket.gethostname(), _dead_pid(), time.time())


@pytest.fixture(params=["local", "zarr-memory", "s3", "icechunk"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ShardStore:
    kind = request.param
    if kind == "local":
        return LocalShardStore(tmp_path / "root", fsync=False)
    if kind == "zarr-memory":
        return ZarrShardStore(zarr.storage.MemoryStore())
    if kind == "s3":
        request.applymarker(pytest.mark.s3)
        bucket, options = request.getfixturevalue("s3_bucket")
        return S3ShardStore(s3fs.S3FileSystem(**options), f"{bucket}/root")
    import icechunk

    from shardpipe.storage.icechunk.store import IcechunkShardStore

    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "r")))
    return IcechunkShardStore(repo.writable_session("main"))


@pytest.fixture
def hook() -> Iterator[dict[str, Any]]:
    """Hold the thread named ``held`` at the step ``state["step"]`` until ``state["go"]``."""
    state: dict[str, Any] = {"step": None, "at": threading.Event(), "go": threading.Event()}

    def held(name: str) -> None:
        if threading.current_thread().name == "held" and name == state["step"]:
            state["at"].set()
            assert state["go"].wait(30)

    journal_stalls._HOOK = held
    yield state
    journal_stalls._HOOK = None


STEPS = ["acquire.read", "acquire.claim", "acquire.check", "acquire.replace", "acquire.unclaim"]


@pytest.mark.parametrize("step", STEPS)
def test_one_of_two_takers_wins(store: ShardStore, hook: dict[str, Any], step: str) -> None:
    stale = _dead_marker("dead")
    store.put(KEYS.marker, [stale.encode()])
    outcome: dict[str, Any] = {}

    def held_taker() -> None:
        try:
            outcome["taken"] = take(store, KEYS, "update")
        except JobConflictError as err:
            outcome["error"] = err

    hook["step"] = step
    thread = threading.Thread(target=held_taker, name="held")
    thread.start()
    deadline = time.monotonic() + 10
    reached = hook["at"].wait(0.02)
    while not reached and thread.is_alive() and time.monotonic() < deadline:
        reached = hook["at"].wait(0.02)
    if not reached:  # this backend takes over without that step (S3 has no claims)
        thread.join(10)
        assert "taken" in outcome
        release(store, KEYS, outcome["taken"].marker)
        return
    try:
        other: Any = take(store, KEYS, "update")
    except JobConflictError:
        other = None  # the held taker was already past the point of no return
    hook["go"].set()
    thread.join(30)
    assert not thread.is_alive()
    takers = [t for t in (other, outcome.get("taken")) if t is not None]
    assert len(takers) == 1, (other, outcome)  # exactly one holds the array
    winner = takers[0]
    assert winner.replaced is not None and winner.replaced.job == "dead"
    check_held(store, KEYS, winner.marker)
    loser = outcome.get("error") if other is not None else None
    if other is not None:
        assert isinstance(loser, JobConflictError), outcome
    release(store, KEYS, winner.marker)
    assert store.get(KEYS.marker) is None
    assert list(store.list(KEYS.claims)) == []


def test_a_claimant_that_died_is_taken_over(store: ShardStore) -> None:
    stale = _dead_marker("dead")
    store.put(KEYS.marker, [stale.encode()])
    store.put(KEYS.claim_key("dead"), [_dead_marker("dead claimant").encode()])
    taken = take(store, KEYS, "update")
    assert taken.replaced is not None and taken.replaced.job == "dead"
    check_held(store, KEYS, taken.marker)
    release(store, KEYS, taken.marker)
    assert store.get(KEYS.marker) is None
    assert list(store.list(KEYS.claims)) == []


def test_a_live_claimant_is_waited_for(store: ShardStore) -> None:
    store.put(KEYS.marker, [_dead_marker("dead").encode()])
    live = JobMarker("claimant", "update", socket.gethostname(), os.getppid(), time.time())
    store.put(KEYS.claim_key("dead"), [live.encode()])
    if store.abilities.replace_if_unchanged:  # one conditional put takes over: no claims
        release(store, KEYS, take(store, KEYS, "update").marker)
        return
    with pytest.raises(JobConflictError, match=r"claimant.*taking this array over.*dead"):
        take(store, KEYS, "update")
    assert json.loads(store.get(KEYS.marker) or b"")["job"] == "dead"  # untouched


def test_a_claim_being_written_by_a_live_job_is_left_to_it(tmp_path: Path) -> None:
    """A job taking a stale marker over while another job writes its claim: the claim's
    temporary file (half written, unreadable) is the live writer's, not a dead claim."""
    from shardpipe.storage.local.temporary import temporary_name

    store = LocalShardStore(tmp_path / "root", fsync=False)
    store.put(KEYS.marker, [_dead_marker("dead").encode()])
    claims = tmp_path / "root" / KEYS.claims
    claims.mkdir(parents=True)
    being_written = claims / temporary_name(KEYS.claim_key("dead").rpartition("/")[2])
    being_written.write_bytes(b'{"job": "clai')  # this process writes it: it may still run
    taken = take(store, KEYS, "update")
    assert being_written.exists()
    release(store, KEYS, taken.marker)


def test_the_last_work_runs_while_the_marker_is_read(tmp_path: Path) -> None:
    """``release(meanwhile=...)``: the marker's read does not wait for the work, nor the reverse."""
    store = LocalShardStore(tmp_path / "root", fsync=False)
    taken = take(store, KEYS, "write")
    reading = threading.Event()
    get = store.get

    def read_while_working(key: str) -> bytes | None:
        if key == KEYS.marker:
            reading.set()
        return get(key)

    store.get = read_while_working  # type: ignore[method-assign]

    def work() -> None:
        assert reading.wait(10), "the marker was not read while the work ran"
        store.put("arr/.shardpipe/write.json", [b"complete"])

    release(store, KEYS, taken.marker, meanwhile=work)
    assert store.get(KEYS.marker) is None
    assert store.get("arr/.shardpipe/write.json") == b"complete"


def test_a_marker_is_let_go_when_the_last_work_fails(tmp_path: Path) -> None:
    store = LocalShardStore(tmp_path / "root", fsync=False)
    taken = take(store, KEYS, "write")

    def work() -> None:
        raise OSError("no space left")

    with pytest.raises(OSError, match="no space left"):
        release(store, KEYS, taken.marker, meanwhile=work)
    assert store.get(KEYS.marker) is None


def test_a_marker_another_job_took_stays(tmp_path: Path) -> None:
    """Another job's marker, there when the last work ended, is not removed."""
    store = LocalShardStore(tmp_path / "root", fsync=False)
    taken = take(store, KEYS, "write")
    other = JobMarker.new("update")
    store.put(KEYS.marker, [other.encode()])  # as if this job had been judged dead
    release(store, KEYS, taken.marker, meanwhile=lambda: None)
    check_held(store, KEYS, other)


def test_when_the_last_work_and_the_read_fail_the_work_s_error_is_raised(tmp_path: Path) -> None:
    store = LocalShardStore(tmp_path / "root", fsync=False)
    taken = take(store, KEYS, "write")

    def unreadable(key: str) -> bytes | None:
        raise OSError("the disk went away")

    def work() -> None:
        raise ValueError("the record was not written")

    store.get = unreadable  # type: ignore[method-assign]
    with pytest.raises(ValueError, match="not written") as raised:
        release(store, KEYS, taken.marker, meanwhile=work)
    assert "the disk went away" in "".join(raised.value.__notes__)


def test_a_job_seen_running_here_is_named_so_and_force_still_takes_over(tmp_path: Path) -> None:
    """A conflict with a job whose pid runs on this machine says to wait for it; ``force``
    is the user's word that the job stopped (the pid may be another PID namespace's) and
    takes the array over. A process that started after the marker was made has the dead
    job's pid again: it is not said to be the job."""
    store = LocalShardStore(tmp_path / "root", fsync=False)
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as other:
        try:
            time.sleep(0.1)
            host = socket.gethostname()
            running = JobMarker("running", "update", host, other.pid, time.time())
            assert running.is_running_here()
            store.put(KEYS.marker, [running.encode()])
            with pytest.raises(JobConflictError, match=r"a process of its pid runs on this"):
                take(store, KEYS, "repair")
            taken = take(store, KEYS, "repair", force=True)
            assert taken.replaced is not None and taken.replaced.job == "running"
            release(store, KEYS, taken.marker)
            if sys.platform.startswith("linux"):  # where a process's start time is known
                reused = JobMarker("reused", "update", host, other.pid, time.time() - 3600)
                assert not reused.is_running_here()
        finally:
            other.kill()
