"""File systems' finalizers that can only fail at exit, made to close on the right loop.

adlfs registers, as it makes a file system, a ``weakref.finalize`` that closes
its client with ``fsspec.asyn.sync(self.loop, ...)``. A file system zarr makes
(asynchronous, its loop given later) has no loop yet then: the finalizer holds
``None`` and, when it runs at exit, raises ``RuntimeError: Loop is not
running``, printed as a traceback after a command that succeeded.
:func:`close_loopless_at_exit` has such finalizers close their clients on
zarr's event loop, where zarr's file systems do their I/O, before ``weakref``
runs them.

gcsfs registers one as it opens its HTTP session, with the file system's loop:
``None`` again for a file system zarr makes, whose session lives on zarr's loop.
Run at exit, gcsfs's ``close_session`` then closes that session on fsspec's
loop instead, where aiohttp refuses it (``attached to a different loop``,
another traceback). :func:`close_sessions_on_their_loop` has gcsfs close such a
session on the loop it belongs to, or, when that loop no longer runs, drop its
connections as gcsfs itself does at shutdown; every other case is left to gcsfs.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import functools
import inspect
import weakref
from collections.abc import Callable
from typing import Any

from shardpipe.internals.zarr_core import loop as zarr_loop
from shardpipe.storage.gcs.options import GCS_SCHEMES

CLOSE_TIMEOUT = 0.1
"""Seconds a session is given to close on its loop (gcsfs gives the same)."""


def close_on_their_loops(location: str) -> None:
    """Have the file systems of URLs close their clients on their own loops at exit.

    Called wherever shardpipe opens ``location``, before anything opens it (and
    outside the error handling of the opening):
    gcsfs's sessions (:func:`close_sessions_on_their_loop`, if ``location`` is
    on GCS) and every loopless finalizer (:func:`close_loopless_at_exit`).
    """
    close_sessions_on_their_loop(location)
    close_loopless_at_exit()


def close_loopless_at_exit() -> None:
    """Have loopless ``fsspec.asyn.sync`` finalizers close on zarr's loop at exit (once).

    Notes
    -----
    Such a finalizer holds its file system, so it runs at exit and not before;
    adlfs makes one with each file system, also each time one is unpickled (as
    Dask does to name a task). Python runs exit handlers last registered first:
    a finalizer made here first has ``weakref`` register its own handler before
    this one, which then runs before it, while zarr's loop still runs (zarr
    stops it from a handler registered as ``zarr.core.sync`` was imported, which
    this module's import of it guarantees came first). All the clients get
    :data:`CLOSE_TIMEOUT` together; one that does not close by then is left to
    end with the process.
    """
    global _ARRANGED
    if not _ARRANGED:
        weakref.finalize(close_loopless_at_exit, lambda: None)
        atexit.register(_close_loopless)
        _ARRANGED = True


_ARRANGED = False


def _close_loopless() -> None:
    try:
        from fsspec.asyn import sync
    except ImportError:
        return
    owner = zarr_loop[0]
    closing: list[Any] = []
    registry: Any = getattr(weakref.finalize, "_registry", {})  # CPython's, since 3.4
    for finalizer in list(registry):
        found = finalizer.peek()
        if found is None or found[1] is not sync or len(found[2]) < 2 or found[2][0] is not None:
            continue
        finalizer.detach()  # it could only raise "Loop is not running"
        if owner is None or not owner.is_running():
            continue  # its connections end with the process
        close, arguments, keywords = found[2][1], found[2][2:], found[3] or {}
        with contextlib.suppress(Exception):  # one that fails to close: left as above
            coroutine = close(*arguments, **keywords)
            if inspect.iscoroutine(coroutine):
                closing.append(coroutine)
    if closing and owner is not None:
        _closed_on(owner, closing)


def _closed_on(owner: asyncio.AbstractEventLoop, coroutines: list[Any]) -> bool:
    """Run ``coroutines`` on the running loop ``owner`` (another thread's) within
    :data:`CLOSE_TIMEOUT`; whether all ended without error (those still running are
    cancelled)."""
    futures = [asyncio.run_coroutine_threadsafe(c, owner) for c in coroutines]
    _, late = concurrent.futures.wait(futures, timeout=CLOSE_TIMEOUT)
    for future in late:
        future.cancel()
    return not late and all(f.exception() is None for f in futures)


def close_sessions_on_their_loop(location: str) -> None:
    """Have gcsfs close a session of no given loop on its own loop, if ``location`` is on GCS.

    Notes
    -----
    Called before anything opens ``location``: gcsfs registers its finalizer as
    it opens a session, with ``close_session`` as it is then. Idempotent.
    """
    if not location.startswith(GCS_SCHEMES):
        return
    try:
        import gcsfs
    except ImportError:
        return
    original = gcsfs.GCSFileSystem.close_session
    if original not in _WRAPPERS:
        wrapper = _on_own_loop(original)
        _WRAPPERS.add(wrapper)
        gcsfs.GCSFileSystem.close_session = staticmethod(wrapper)


_WRAPPERS: set[Callable[..., None]] = set()
"""The ``close_session`` functions made here (so that gcsfs's is wrapped once)."""


def _on_own_loop(original: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(original)
    def close_session(loop: Any, session: Any, asynchronous: bool = False) -> None:
        owner = getattr(session, "_loop", None)
        if loop is not None or owner is None or session.closed or _fsspec_loop() is owner:
            return original(loop, session, asynchronous)
        with contextlib.suppress(RuntimeError):
            if asyncio.get_running_loop() is owner:  # collected on its own loop
                return original(loop, session, asynchronous)
        if owner.is_running() and not owner.is_closed() and _closed_on(owner, [session.close()]):
            return None
        connector = getattr(session, "_connector", None)
        if connector is not None:  # the loop is gone: its connections, as gcsfs drops them
            connector._close()
        return None

    return close_session


def _fsspec_loop() -> Any:
    from fsspec import asyn

    return asyn.loop[0]
