"""The command line after faults: exit statuses, ``verify --complete``, ``cleanup``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import pytest
import zarr

from shardpipe.cli.exit_statuses import (
    BAD_INPUT,
    INTERRUPTED,
    NO_ACCESS,
    OK,
    PROBLEMS,
    STORAGE_FAILED,
)
from shardpipe.cli.parser import main
from shardpipe.errors import StorageFullError
from shardpipe.storage.local.store import LocalShardStore
from shardpipe.storage.resolve import ResolvedStore
from shardpipe.storage.retry import RetryingStore
from shardpipe.testing.faults import FaultyStore
from shardpipe.write.prepare import prepare_write

LAYOUT = dict(shards=(16, 32, 32), chunks=(8, 16, 16))


@pytest.fixture(autouse=True)
def _threads() -> Iterator[None]:
    with dask.config.set(scheduler="threads"):
        yield


def _source() -> da.Array:
    data = np.random.default_rng(0).integers(0, 500, (64, 64, 64)).astype("uint16")
    return da.from_array(data, chunks=(16, 32, 32))


def _interrupted(path: Path) -> None:
    """A write stopped by a full disk after a few shards."""
    faulty = FaultyStore(LocalShardStore(path), share=0.0, full_after=5)
    target = ResolvedStore(zarr.storage.LocalStore(path), RetryingStore(faulty), "")
    with pytest.raises(StorageFullError):
        prepare_write(_source(), target, **LAYOUT).execute()


def test_verify_complete_flags_an_unfinished_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _interrupted(tmp_path)
    assert main(["verify", str(tmp_path)]) == OK
    out = capsys.readouterr().out
    assert (
        "an unfinished write of the array" in out
        and "resume=True (a Python call) or --resume (a command)" in out
        and out.rstrip().endswith("OK")
    )
    assert main(["verify", str(tmp_path), "--complete"]) == PROBLEMS
    assert "an unfinished write of the array" in capsys.readouterr().out
    prepare_write(_source(), str(tmp_path), resume=True, **LAYOUT).execute()
    assert main(["verify", str(tmp_path), "--complete"]) == OK


def test_verify_complete_flags_staging(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    staging = tmp_path / ".shardpipe/staging/job/c.0.0.0"
    shard_source = _source()
    prepare_write(shard_source, str(tmp_path), **LAYOUT).execute()
    staging.mkdir(parents=True)
    (staging / "part-00000").write_bytes(b"left by a killed write")
    assert main(["verify", str(tmp_path)]) == OK
    assert "staging area" in capsys.readouterr().out
    assert main(["verify", str(tmp_path), "--complete"]) == PROBLEMS
    assert main(["cleanup", str(tmp_path)]) == OK
    assert not staging.exists()
    assert main(["verify", str(tmp_path), "--complete"]) == OK


def test_cleanup_of_nothing_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "no-such.zarr"
    assert main(["cleanup", str(missing)]) == BAD_INPUT
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nothing to clean up" in err
    assert not missing.exists()


def _mount(where: Path, options: str) -> bool:
    where.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True
    )
    return done.returncode == 0


@pytest.mark.skipif(sys.platform != "linux", reason="mounts a Linux tmpfs")
def test_exit_statuses_of_storage_faults(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "source.zarr"
    prepare_write(_source(), str(source), **LAYOUT).execute()
    readonly, small = tmp_path / "ro", tmp_path / "small"
    if not _mount(readonly, "ro,size=1m"):
        pytest.skip("cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN)")
    try:
        assert _mount(small, "size=200k")
        args = ["rechunk", str(source), "--shards", "32,32,32", "--chunks", "16,16,16"]
        assert main([*args[:2], str(readonly / "a.zarr"), *args[2:], "--no-progress"]) == (
            NO_ACCESS
        )
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "writable" in err
        status = main([*args[:2], str(small / "a.zarr"), *args[2:], "--no-progress"])
        assert status == STORAGE_FAILED
        err = capsys.readouterr().err
        assert "ENOSPC" in err and "--resume" in err
    finally:
        for where in (readonly, small):
            subprocess.run(["umount", "-l", str(where)], check=False)


@pytest.mark.parametrize(
    "workers", [[], pytest.param(["--workers", "2"], marks=pytest.mark.cluster)], ids=["", "2"]
)
def test_ctrl_c_ends_a_command_in_one_message_and_status_130(
    tmp_path: Path, workers: list[str]
) -> None:
    """SIGINT while the command holds the array: no traceback but one line, the status
    shells give a command Ctrl-C stopped, and a state that ``--resume`` completes (the
    command printed some 40 lines of traceback and died of the signal). With
    ``--workers``, the terminal's SIGINT reaches the whole job, the LocalCluster's
    worker processes too: they leave it to the command (they printed their own
    tracebacks, and the command failed with ``CommClosedError`` at some instants)."""
    source, target = tmp_path / "source.zarr", tmp_path / "target.zarr"
    prepare_write(_source(), str(source), **LAYOUT).execute()
    command = [sys.executable, "-m", "shardpipe", "rechunk", str(source), str(target)]
    command += ["--shards", "32,32,32", "--chunks", "16,16,16"]
    # the shards written, the command stops before it lets the array go
    environment = {**os.environ, "SHARDPIPE_JOURNAL_STALL": "release.read=60"}
    running = subprocess.Popen(
        [*command, *workers],
        env=environment,
        stderr=subprocess.PIPE,
        text=True,
        # as a terminal would have it, though the tests run where SIGINT is ignored
        # (a background job), which the command would inherit
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        start_new_session=True,  # a job of its own, as a shell starts it
    )
    deadline = time.monotonic() + 60
    while running.poll() is None and time.monotonic() < deadline:
        if len(list((target / "c").rglob("*"))) >= 8 + 4 + 2:  # 8 shards in their folders
            break
        time.sleep(0.05)
    time.sleep(0.5)  # at the stall: the shards are published before it
    os.killpg(running.pid, signal.SIGINT)  # Ctrl-C: to every process of the job
    _, err = running.communicate(timeout=30)
    assert running.returncode == INTERRUPTED == 130
    assert err.splitlines()[0] == "shardpipe rechunk: interrupted", err
    assert "Traceback" not in err
    resumed = subprocess.run([*command, "--resume"], capture_output=True, text=True)  # threads
    assert resumed.returncode == OK, resumed.stderr
    assert main(["verify", str(target), "--complete"]) == OK


def test_the_gathers_a_ctrl_c_ended_are_not_logged() -> None:
    """asyncio logs an exception nobody retrieved; the AllExit of each gather an
    interrupt left is dropped, any other kept."""
    import logging

    from distributed.client import AllExit

    from shardpipe.cli.worker_interrupts import QuietGathers

    def record(error: BaseException) -> logging.LogRecord:
        info = (type(error), error, None)
        message = "Task exception was never retrieved"
        return logging.LogRecord("asyncio", logging.ERROR, __file__, 1, message, (), info)

    assert not QuietGathers().filter(record(AllExit()))
    assert QuietGathers().filter(record(ValueError("kept")))
    assert QuietGathers().filter(logging.LogRecord("asyncio", 40, __file__, 1, "x", (), None))
