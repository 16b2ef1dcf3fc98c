"""Jobs racing on one array, one of them stalled at each step of acquire/recover/release.

Two long-lived worker processes (``tests.support.race_worker``) run jobs on the same
array at once. One is made to stall at a step of the journal
(:data:`shardpipe.journal.stalls.STEPS`, each in turn), the other at a
random one for a shorter while. Most runs start from what a killed job
leaves: its marker (its process is gone) and a torn shard with its undo
record; some runs have the second job run ``repair`` instead of an update.

Whatever the interleaving: no update is lost (a job that reported success
finds its data, checked against a model of the array), every job ends in
success or :class:`~shardpipe.errors.JobConflictError` (never a raw
``OSError``), the dead job's torn shard is back to its old bytes, the array
verifies, and nothing of any job is left beside it.

``SHARDPIPE_RACE_RUNS`` (default 50) and ``SHARDPIPE_RACE_STALL`` (longest
stall in seconds, default 0.3) make a longer run by hand.
"""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import shardpipe
from shardpipe.journal.markers import JobKeys
from shardpipe.journal.stalls import STEPS
from shardpipe.journal.undo import UndoRecord
from tests.support.fork_server import ForkServer
from tests.support.readers import read_zarr

RUNS = int(os.environ.get("SHARDPIPE_RACE_RUNS", "50"))
LONGEST_STALL = float(os.environ.get("SHARDPIPE_RACE_STALL", "0.3"))

SHAPE, SHARDS, CHUNKS = (32, 128, 128), (16, 64, 64), (8, 32, 32)
REGIONS = {
    "a": ((0, 16), (0, 128), (0, 128)),  # shards (0, *, *)
    "b": ((16, 32), (0, 64), (0, 128)),  # shards (1, 0, *)
}
TORN = "c/1/1/1"  # the dead job's shard, in neither region
WRITING = ("update.recorded", "update.written")
"""Steps inside a shard's positioned write, where the other job stalls half the time."""


class Worker:
    """One ``tests.support.race_worker`` process, forked by the fork server.

    It answers on a Unix socket (an abstract one: no file, no path length limit).
    """

    def __init__(self, server: ForkServer) -> None:
        address = f"@shardpipe-race-{os.getpid()}-{random.getrandbits(64):016x}"
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(address.replace("@", "\0", 1))
        listener.listen(1)
        listener.settimeout(120)
        self.child = server.start("tests.support.race_worker", [address])
        self.pid = self.child.pid
        try:
            self.connection, _ = listener.accept()
        except TimeoutError:
            raise AssertionError(f"race worker did not connect: {self.child.stderr()}") from None
        finally:
            listener.close()
        self.connection.settimeout(None)
        self.stream = self.connection.makefile("rw")
        assert json.loads(self._line())["ready"] == self.pid

    def _line(self) -> str:
        line = self.stream.readline()
        assert line, f"race worker {self.pid} stopped (exit {self.child.poll()})"
        return line

    def send(self, command: dict[str, Any]) -> None:
        self.stream.write(json.dumps(command) + "\n")
        self.stream.flush()

    def answer(self) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(self._line())
        return result

    def close(self) -> None:
        self.stream.close()
        self.connection.close()
        try:
            self.child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.child.kill()
            self.child.wait()


@pytest.fixture(scope="module")
def workers(fork_server: ForkServer) -> Iterator[tuple[Worker, Worker]]:
    pair = (Worker(fork_server), Worker(fork_server))
    yield pair
    for worker in pair:
        worker.close()


def _dead_pid() -> int:
    """The id of a process of this machine that has ended."""
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    pid = int(done.stdout)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    return pid


def _killed_job(path: Path, pid: int) -> bytes:
    """Leave what a job killed mid-update leaves; return the old bytes of its torn shard."""
    old = (path / TORN).read_bytes()
    job = f"{random.getrandbits(128):032x}"
    record = path / JobKeys("").undo_key(job, TORN)
    record.parent.mkdir(parents=True)
    record.write_bytes(UndoRecord(TORN, len(old), ((0, old),)).encode())
    with open(path / TORN, "r+b") as f:  # torn: new bytes over its index, and past its end
        f.seek(len(old) - 40)
        f.write(os.urandom(300))
    marker = {
        "job": job,
        "action": "update",
        "host": socket.gethostname(),
        "pid": pid,
        "started": time.time(),
    }
    (path / ".shardpipe" / "job.json").write_text(json.dumps(marker))
    return old


def _shards_of(region: tuple[tuple[int, int], ...]) -> Iterator[tuple[slice, ...]]:
    """The boxes of the shards a region covers (regions here are whole shards)."""
    (z0, z1), (y0, y1), (x0, x1) = region
    for z in range(z0, z1, SHARDS[0]):
        for y in range(y0, y1, SHARDS[1]):
            for x in range(x0, x1, SHARDS[2]):
                yield np.s_[z : z + SHARDS[0], y : y + SHARDS[1], x : x + SHARDS[2]]


def _leftovers(path: Path) -> list[str]:
    """Anything of a job still beside the array: marker, records, claims, temporary files."""
    return sorted(
        p.relative_to(path).as_posix()
        for p in path.rglob("*")
        if p.is_file()
        and p.name != "write.json"  # the record of the write that made the array
        and (".shardpipe" in p.parts or p.name.endswith(".shardpipe-tmp"))
    )


def _one_run(tmp_path: Path, run: int, pair: tuple[Worker, Worker], pid: int) -> dict[str, Any]:
    rng = random.Random(run)
    step = STEPS[run % len(STEPS)]
    path = tmp_path / f"a{run}.zarr"
    shardpipe.to_sharded_zarr(
        np.zeros(SHAPE, "uint16"),
        str(path),
        shards=SHARDS,
        chunks=CHUNKS,
        write_empty_chunks=True,
        storage_options={"fsync": False},
    )
    stale = rng.random() < 0.8
    old_torn = _killed_job(path, pid) if stale else (path / TORN).read_bytes()
    go = tmp_path / f"go{run}"
    first, second = pair if run % 2 == 0 else pair[::-1]
    values = {"a": 1000 + run, "b": 2000 + run}
    commands = {
        "a": {"action": "update", "stall": step, "seconds": rng.uniform(0.05, LONGEST_STALL)},
        "b": {
            "action": "repair" if run % 3 == 2 else "update",
            "stall": rng.choice(WRITING if rng.random() < 0.5 else STEPS),
            "seconds": rng.uniform(0.0, LONGEST_STALL / 2),
        },
    }
    delays = {"a": 0.0, "b": rng.uniform(0.0, 0.1)}
    for name, worker in (("a", first), ("b", second)):
        worker.send(
            {
                **commands[name],
                "path": str(path),
                "region": REGIONS[name],
                "value": values[name],
                "delay": delays[name],
                "go": str(go),
            }
        )
    go.touch()
    answers = {"a": first.answer(), "b": second.answer()}
    context = {"run": run, "step": step, "stale": stale, "commands": commands, "answers": answers}
    for name, answer in answers.items():
        if answer["outcome"] not in ("ok", "conflict"):
            pytest.fail(f"job {name} failed with {answer['error']}\nin {context}")
    assert "ok" in {a["outcome"] for a in answers.values()}, context
    got = read_zarr(str(path))
    for name, answer in answers.items():
        if commands[name]["action"] == "repair":
            continue
        for box in _shards_of(REGIONS[name]):
            shard = got[box]
            if answer["outcome"] == "ok":  # its update must be there, whole
                assert (shard == values[name]).all(), (name, box, context)
            else:  # refused, or stopped between shards: each shard old or new
                assert (shard == 0).all() or (shard == values[name]).all(), (name, box, context)
    assert (path / TORN).read_bytes() == old_torn, context
    assert shardpipe.verify(str(path)).ok, context
    assert _leftovers(path) == [], (_leftovers(path), context)
    return {
        "step reached": step in answers["a"]["steps"],
        "step": step,
        "outcomes": tuple(answers[n]["outcome"] for n in ("a", "b")),
    }


def test_racing_jobs_never_lose_an_update(
    tmp_path: Path, workers: tuple[Worker, Worker], capsys: pytest.CaptureFixture[str]
) -> None:
    pid = _dead_pid()
    start = time.perf_counter()
    reached: Counter[str] = Counter()
    outcomes: Counter[tuple[str, ...]] = Counter()
    for run in range(RUNS):
        result = _one_run(tmp_path, run, workers, pid)
        reached[result["step"]] += result["step reached"]
        outcomes[result["outcomes"]] += 1
    seconds = time.perf_counter() - start
    with capsys.disabled():
        print(
            f"\n{RUNS} races in {seconds:.1f} s; outcomes (stalled job, other): "
            f"{dict(outcomes)}; stalled step reached: {dict(reached)}"
        )
    if 2 * len(STEPS) <= RUNS:
        missed = [step for step in STEPS if not reached[step]]
        assert not missed, f"steps never reached by the stalled job: {missed}"


@pytest.mark.parametrize(
    ("stall", "other_stall"),
    [
        # the takeover of the dead job's marker stalls while the other job takes the
        # array and writes a shard: the late takeover must not roll that shard back
        (("acquire.claim", 0.8), ("update.written", 1.5)),
        (("acquire.claim", 0.8), ("update.recorded", 1.5)),
        # the late job's recovery (of a marker it read long ago) meets a live job
        (("recover.rollback", 0.8), ("update.written", 1.5)),
        (("recover.cleanup", 0.8), ("update.written", 1.5)),
    ],
    ids=["claim/written", "claim/recorded", "rollback/written", "cleanup/written"],
)
def test_a_stalled_takeover_never_undoes_a_live_job(
    tmp_path: Path,
    workers: tuple[Worker, Worker],
    stall: tuple[str, float],
    other_stall: tuple[str, float],
) -> None:
    """The interleavings that lost updates before takeovers were atomic, made on purpose."""
    path = tmp_path / "a.zarr"
    shardpipe.to_sharded_zarr(
        np.zeros(SHAPE, "uint16"), str(path), shards=SHARDS, chunks=CHUNKS, write_empty_chunks=True
    )
    old_torn = _killed_job(path, _dead_pid())
    go = tmp_path / "go"
    late, other = workers
    late.send(
        {"action": "update", "stall": stall[0], "seconds": stall[1], "delay": 0.0}
        | {"path": str(path), "region": REGIONS["a"], "value": 1, "go": str(go)}
    )
    other.send(
        {"action": "update", "stall": other_stall[0], "seconds": other_stall[1], "delay": 0.2}
        | {"path": str(path), "region": REGIONS["b"], "value": 2, "go": str(go)}
    )
    go.touch()
    answers = {"late": late.answer(), "other": other.answer()}
    for name, answer in answers.items():
        if answer["outcome"] not in ("ok", "conflict"):
            pytest.fail(f"job {name} failed with {answer['error']}")
    got = read_zarr(str(path))
    for name, region, value in (("late", "a", 1), ("other", "b", 2)):
        for box in _shards_of(REGIONS[region]):
            if answers[name]["outcome"] == "ok":
                assert (got[box] == value).all(), (name, box, answers)
            else:
                assert (got[box] == 0).all() or (got[box] == value).all(), (name, box, answers)
    assert (path / TORN).read_bytes() == old_torn
    assert shardpipe.verify(str(path)).ok
    assert _leftovers(path) == []
