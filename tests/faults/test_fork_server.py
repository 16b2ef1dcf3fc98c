"""The fork server's helpers: a child that ends right after it reports is no failure; a child
past its time is killed."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import cast

import pytest

from tests.support.fork_server import ForkedChild, ForkServer, wait_for_word


class _FastChild:
    """A child that writes ``started`` and ends between the test's two looks at it."""

    def __init__(self, progress: Path, writes: bool) -> None:
        self.progress, self.writes = progress, writes
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.writes:
            self.progress.write_text("started\n")
        self.returncode = 0
        return 0

    def stderr(self) -> str:
        return ""


def test_a_child_that_wrote_the_word_and_ended_counts(tmp_path: Path) -> None:
    progress = tmp_path / "progress"
    wait_for_word(progress, "started", cast(ForkedChild, _FastChild(progress, writes=True)))


def test_a_child_that_ended_without_the_word_fails_the_wait(tmp_path: Path) -> None:
    progress = tmp_path / "progress"
    with pytest.raises(AssertionError):
        wait_for_word(progress, "started", cast(ForkedChild, _FastChild(progress, writes=False)))


def test_a_child_past_its_time_is_killed_and_reaped(fork_server: ForkServer) -> None:
    child = fork_server.start(None, [], code="import time; time.sleep(600)")
    with pytest.raises(subprocess.TimeoutExpired):
        child.wait_or_kill(0.5)
    assert child.returncode == -9


def test_a_child_within_its_time_gives_its_status(fork_server: ForkServer) -> None:
    child = fork_server.start(None, [], code="import sys; sys.exit(3)")
    assert child.wait_or_kill(60) == 3


def test_an_earlier_childs_exit_status_under_a_reused_pid_is_not_taken(
    tmp_path: Path, fork_server: ForkServer
) -> None:
    """pids come round again: a stale ``<pid>.rc`` of an earlier child must not end a new one."""
    first = fork_server.start(None, [], code="pass")
    first.wait()
    folder = fork_server.folder
    stale = [folder / f"{first.pid + n}.rc" for n in range(1, 400)]  # pids come in order
    for path in stale:
        if not path.exists():
            path.write_text("0")
    child = fork_server.start(None, [], code="import time; time.sleep(1)")
    try:
        assert child.poll() is None, f"pid {child.pid} taken for ended"
    finally:
        child.kill()
        child.wait()
        for path in stale:
            path.unlink(missing_ok=True)
