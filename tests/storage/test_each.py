"""call_each: every item once, a few threads at a time, stopped by the first failure."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from shardpipe.storage.each import call_each


def test_every_item_is_called_once_within_the_threads() -> None:
    seen: list[int] = []
    running, most = [0], [0]
    lock = threading.Lock()

    def call(item: int) -> None:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.002)
        with lock:
            seen.append(item)
            running[0] -= 1

    call_each(call, iter(range(50)), 4)
    assert sorted(seen) == list(range(50))
    assert 1 < most[0] <= 4


def test_the_first_failure_stops_the_rest_and_nothing_runs_after_it() -> None:
    calls: list[int] = []

    def call(item: int) -> None:
        calls.append(item)
        if item == 3:
            raise OSError("refused")
        time.sleep(0.01)

    with pytest.raises(OSError, match="refused"):
        call_each(call, range(1000), 2)
    after = len(calls)
    assert after < 10  # stopped, not carried through the other 996 items
    time.sleep(0.05)
    assert len(calls) == after  # every call under way had ended when it raised


def test_the_failure_raised_is_the_one_that_came_first() -> None:
    """The first thread's item fails after the second thread's: the second's is raised."""
    second_failed = threading.Event()

    def call(item: int) -> None:
        if item == 0:
            second_failed.wait(5)
            time.sleep(0.2)  # the other's failure is recorded meanwhile
            raise OSError("later")
        second_failed.set()
        raise OSError("sooner")

    with pytest.raises(OSError, match="sooner"):
        call_each(call, [0, 1], 2)


def test_ctrl_c_while_waiting_starts_no_more_calls() -> None:
    """SIGINT reaches the thread waiting for the calls: it is raised once the calls under
    way ended, and no call starts after it (the threads carried on through every item)."""
    calls: list[int] = []

    def call(item: int) -> None:
        calls.append(item)
        if item == 3:
            os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.01)

    # SIGINT raises here even where this process inherited it ignored (a background job)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            call_each(call, range(1000), 2)
    finally:
        signal.signal(signal.SIGINT, previous)
    after = len(calls)
    assert after < 20
    time.sleep(0.05)
    assert len(calls) == after
