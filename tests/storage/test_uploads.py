"""A process's uploads: bounded by requests and bytes, settled exactly, closed after a failure."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import dask
import pytest

from shardpipe.errors import InvalidArgumentError, StorageError
from shardpipe.storage import uploads
from shardpipe.storage.uploads import UploadRun, Uploads, request_limit


class _Gate:
    """Uploads that wait until let go, counting how many run at once."""

    def __init__(self) -> None:
        self.released = threading.Event()
        self.lock = threading.Lock()
        self.running = 0
        self.most = 0
        self.done: list[int] = []

    def upload(self, n: int, fail: bool = False) -> None:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        self.released.wait(10)
        with self.lock:
            self.running -= 1
            self.done.append(n)
        if fail:
            raise StorageError(f"upload {n} failed")


@pytest.fixture
def gate() -> Iterator[_Gate]:
    g = _Gate()
    yield g
    g.released.set()


def _hand_on_in_thread(
    up: Uploads, run: UploadRun, nbytes: int, gate: _Gate, n: int
) -> threading.Thread:
    def hand() -> None:
        up.hand_on(run, nbytes, lambda: gate.upload(n))

    thread = threading.Thread(target=hand, daemon=True)
    thread.start()
    return thread


def test_requests_in_flight_stay_within_the_limit(gate: _Gate) -> None:
    up = Uploads()
    run = UploadRun("g", requests=3, nbytes=10**9)
    up.open_group("g")
    threads = [_hand_on_in_thread(up, run, 1, gate, n) for n in range(8)]
    time.sleep(0.3)
    assert gate.running == 3  # the others wait to be handed on
    assert sum(t.is_alive() for t in threads) == 5
    gate.released.set()
    for t in threads:
        t.join(10)
    up.close_group("g", failed=False)
    assert sorted(gate.done) == list(range(8))
    assert gate.most == 3 and up.peak_requests == 3


def test_bytes_in_flight_stay_within_the_budget(gate: _Gate) -> None:
    up = Uploads()
    run = UploadRun("g", requests=100, nbytes=250)
    up.open_group("g")
    threads = [_hand_on_in_thread(up, run, 100, gate, n) for n in range(6)]
    time.sleep(0.3)
    assert gate.running == 2  # a third would make 300 bytes
    gate.released.set()
    for t in threads:
        t.join(10)
    up.close_group("g", failed=False)
    assert up.peak_nbytes == 200
    assert len(gate.done) == 6


def test_an_upload_larger_than_the_budget_goes_alone(gate: _Gate) -> None:
    up = Uploads()
    run = UploadRun("g", requests=10, nbytes=100)
    up.open_group("g")
    big = _hand_on_in_thread(up, run, 1000, gate, 0)
    big.join(5)
    assert not big.is_alive()  # handed on: nothing else was in flight
    small = _hand_on_in_thread(up, run, 1, gate, 1)
    time.sleep(0.2)
    assert small.is_alive() and gate.running == 1  # waits for the big one
    gate.released.set()
    small.join(5)
    up.close_group("g", failed=False)
    assert up.peak_nbytes == 1000


def test_settle_waits_for_every_upload_then_raises_the_first_failure(gate: _Gate) -> None:
    up = Uploads()
    run = UploadRun("g", requests=10, nbytes=10**9)
    up.open_group("g")
    tickets = [
        up.hand_on(run, 1, lambda n=n: gate.upload(n, fail=n == 1))  # type: ignore[misc]
        for n in range(4)
    ]
    threading.Timer(0.2, gate.released.set).start()
    with pytest.raises(StorageError, match="upload 1 failed"):
        up.settle([t.number for t in tickets])
    assert sorted(gate.done) == [0, 1, 2, 3]  # all ended before the error was raised
    assert up.settle([t.number for t in tickets]) == [0, 0, 0, 0]  # settled once only
    up.close_group("g", failed=False)


def test_settle_counts_the_retries_each_upload_made() -> None:
    from shardpipe.storage import retry

    up = Uploads()
    run = UploadRun("g", requests=4, nbytes=10**9)
    up.open_group("g")

    def retried_twice() -> None:
        retry._count_retry()
        retry._count_retry()

    tickets = [up.hand_on(run, 1, retried_twice), up.hand_on(run, 1, lambda: None)]
    assert up.settle([t.number for t in tickets]) == [2, 0]
    up.close_group("g", failed=False)


def test_closing_a_failed_group_waits_for_its_uploads_and_keeps_quiet(gate: _Gate) -> None:
    up = Uploads()
    run = UploadRun("g", requests=10, nbytes=10**9)
    up.open_group("g")
    for n in range(3):
        up.hand_on(run, 1, lambda n=n: gate.upload(n, fail=True))  # type: ignore[misc]
    threading.Timer(0.3, gate.released.set).start()
    began = time.monotonic()
    up.close_group("g", failed=True)  # the run raises its own error
    assert time.monotonic() - began >= 0.25
    assert sorted(gate.done) == [0, 1, 2]  # nothing still in flight after the close
    assert not up.is_open("g")


def test_closing_a_group_that_succeeded_raises_an_upload_not_settled(gate: _Gate) -> None:
    up = Uploads()
    run = UploadRun("g", requests=10, nbytes=10**9)
    up.open_group("g")
    up.hand_on(run, 1, lambda: gate.upload(0, fail=True))
    gate.released.set()
    with pytest.raises(StorageError, match="upload 0 failed"):
        up.close_group("g", failed=False)


def test_after_a_failed_upload_the_run_hands_nothing_more_on() -> None:
    up = Uploads()
    run = UploadRun("g", requests=10, nbytes=10**9)
    other = UploadRun("other", requests=10, nbytes=10**9)
    up.open_group("g")
    up.open_group("other")

    def fails() -> None:
        raise StorageError("the store refused it")

    ticket = up.hand_on(run, 1, fails)
    with pytest.raises(StorageError, match="refused"):
        up.settle([ticket.number])
    ran: list[int] = []
    with pytest.raises(StorageError, match="refused"):  # the run is lost: its tasks stop
        up.hand_on(run, 1, lambda: ran.append(1))
    up.settle([up.hand_on(other, 1, lambda: ran.append(2)).number])  # another run goes on
    assert ran == [2]
    up.close_group("g", failed=True)
    up.close_group("other", failed=False)
    up.open_group("g")  # the group's failure ended with it
    up.settle([up.hand_on(run, 1, lambda: ran.append(3)).number])
    assert ran == [2, 3]
    up.close_group("g", failed=False)


def test_a_task_waiting_for_room_stops_when_an_upload_of_its_run_fails(gate: _Gate) -> None:
    up = Uploads()
    run = UploadRun("g", requests=1, nbytes=10**9)
    up.open_group("g")
    up.hand_on(run, 1, lambda: gate.upload(0, fail=True))
    raised: list[BaseException] = []

    def waiting() -> None:
        try:
            up.hand_on(run, 1, lambda: gate.upload(1))
        except StorageError as err:
            raised.append(err)

    thread = threading.Thread(target=waiting, daemon=True)
    thread.start()
    time.sleep(0.1)
    assert not raised  # waits for room
    gate.released.set()
    thread.join(5)
    assert [str(e) for e in raised] == ["upload 0 failed"]
    assert gate.done == [0]  # the waiting upload never ran
    up.close_group("g", failed=True)


def test_a_group_not_open_here_uploads_in_the_task() -> None:
    run = UploadRun("not-opened-here", requests=4, nbytes=100)
    assert uploads.hand_on(run, 1, lambda: None) is None
    assert uploads.hand_on(None, 1, lambda: None) is None


def test_groups_are_counted_opened_as_often_as_closed() -> None:
    up = Uploads()
    up.open_group("g")
    up.open_group("g")
    up.close_group("g", failed=False)
    assert up.is_open("g")
    up.close_group("g", failed=False)
    assert not up.is_open("g")


def test_tickets_of_another_process_are_refused() -> None:
    ticket = uploads.Ticket("", process=-1, number=1)
    with pytest.raises(ValueError, match="another process"):
        uploads.settle([ticket])


@pytest.mark.parametrize("value", [0, -1, 257, 2.5, "32", True])
def test_a_bad_request_limit_names_the_setting_and_the_fix(value: object) -> None:
    setting = dask.config.set({"shardpipe.uploads.requests": value})
    with setting, pytest.raises(InvalidArgumentError, match=r"uploads\.requests.*integer"):
        request_limit()


def test_the_request_limit_comes_from_dask_config() -> None:
    assert request_limit() == uploads.DEFAULT_REQUESTS
    with dask.config.set({"shardpipe.uploads.requests": 7}):
        assert request_limit() == 7
