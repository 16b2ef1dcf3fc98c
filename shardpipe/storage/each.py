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
    this has raised. No more threads start than there are items (when
    ``items`` has a length).
    """
    if isinstance(items, Sized):
        threads = min(threads, len(items))
    if threads < 1:
        return
    pending, taking, failed = iter(items), threading.Lock(), threading.Event()
    missing = object()

    def worker() -> None:
        while not failed.is_set():
            with taking:
                item = next(pending, missing)
            if item is missing:
                return
            try:
                func(item)  # type: ignore[arg-type]  # not the sentinel here
            except BaseException:
                failed.set()
                raise

    with ThreadPoolExecutor(threads) as pool:
        workers = [pool.submit(worker) for _ in range(threads)]
    for done in workers:
        done.result()
