"""Calls on a few threads at a time that stop at the first failure (a backend's many requests)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sized
from concurrent.futures import ThreadPoolExecutor


def call_each[T](func: Callable[[T], object], items: Iterable[T], threads: int) -> None:
    """Call ``func`` on every item, ``threads`` calls at a time; raise the first failure.

    The items are taken as the threads free up (none is held beyond the
    calls under way). Once a call fails, no further call starts, and the
    failure is raised after the calls under way ended: nothing runs on once
    this has raised. Of failures in several threads, the one that happened
    first is raised (an error of ``items`` itself counts as one). No more
    threads start than there are items (when ``items`` has a length).
    """
    if isinstance(items, Sized):
        threads = min(threads, len(items))
    if threads < 1:
        return
    pending, taking = iter(items), threading.Lock()
    failures: list[BaseException] = []  # in the order they happened
    missing = object()

    def worker() -> None:
        try:
            while True:
                with taking:  # no call starts once a failure is recorded
                    item = missing if failures else next(pending, missing)
                if item is missing:
                    return
                func(item)  # type: ignore[arg-type]  # not the sentinel here
        except BaseException as err:  # the items' iterator's too
            with taking:
                failures.append(err)

    pool = ThreadPoolExecutor(threads)
    try:
        for _ in range(threads):
            pool.submit(worker)
        pool.shutdown(wait=True)
    except BaseException as err:  # Ctrl-C while waiting: the threads start no more calls
        with taking:
            failures.insert(0, err)
        pool.shutdown(wait=True)
        raise
    if failures:
        raise failures[0]
