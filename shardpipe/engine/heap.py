"""Large buffers from the heap while shardpipe's tasks run (glibc only).

glibc serves an allocation of at least ``M_MMAP_THRESHOLD`` bytes with a
fresh ``mmap``, unmapped again when it is freed: every page of such a buffer
faults in, zeroed, each time one is allocated. By default the threshold
adapts: it rises to the size of the largest mmapped buffer freed so far (up
to 32 MiB on 64-bit systems, the trim threshold to twice that), so a process
that keeps allocating and freeing 8 MiB blocks soon serves them from its
heap. Setting any of ``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_TOP_PAD_`` or
``MALLOC_MMAP_MAX_`` (or their ``GLIBC_TUNABLES``) turns that adaptation off
and leaves the threshold at 128 KiB. ``distributed``'s nanny sets
``MALLOC_TRIM_THRESHOLD_=65536`` in every worker process it starts
(``distributed.nanny.pre-spawn-environ``), so that freed memory goes back to
the system. Then every block, every inner chunk's copy and every encoded
chunk of 128 KiB or more is a fresh mapping. Measured on a 1 GiB volume of
8 MiB blocks and 256 KiB inner chunks (zstd-1): the write's CPU time rose
from 5.5 s to 7.0 s with that variable set (Dask's synchronous scheduler),
and a ``LocalCluster``'s two workers took 300,000 page faults per write.

While at least one of shardpipe's tasks runs in such a process,
:func:`heap_buffers` sets both thresholds to where glibc's adaptation would
take them (32 MiB and 64 MiB), and puts back the fixed values when the last
one ends. The heap then keeps, between tasks, about what one task held at
its peak (per thread); the first large ``free`` outside shardpipe's tasks
trims it again. Nothing changes where glibc adapts the thresholds itself,
where someone chose the mmap threshold (``MALLOC_MMAP_THRESHOLD_`` or the
``glibc.malloc.mmap_threshold`` tunable: setting it is also the way to opt
out), or on other C libraries.
"""

from __future__ import annotations

import ctypes
import os
import platform
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, NamedTuple

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
"""``mallopt`` parameter numbers (glibc's ``malloc.h``)."""

FIXED_MMAP_THRESHOLD = 128 * 1024
FIXED_TRIM_THRESHOLD = 128 * 1024
"""glibc's thresholds when it does not adapt them and nobody chose them."""

RAISED_MMAP_THRESHOLD = 4 * 1024 * 1024 * ctypes.sizeof(ctypes.c_long)
"""The largest mmap threshold glibc's adaptation reaches (``DEFAULT_MMAP_THRESHOLD_MAX``)."""

RAISED_TRIM_THRESHOLD = 2 * RAISED_MMAP_THRESHOLD
"""The trim threshold glibc's adaptation sets with it."""

_STOP_ADAPTING = {
    "MALLOC_TRIM_THRESHOLD_": "glibc.malloc.trim_threshold",
    "MALLOC_TOP_PAD_": "glibc.malloc.top_pad",
    "MALLOC_MMAP_MAX_": "glibc.malloc.mmap_max",
}


class Thresholds(NamedTuple):
    """glibc's mmap and trim thresholds, in bytes."""

    mmap: int
    trim: int


def fixed_thresholds(environ: Mapping[str, str]) -> Thresholds | None:
    """The thresholds glibc keeps fixed in a process started with ``environ``.

    None when glibc adapts them itself, when the mmap threshold was chosen
    explicitly (then it is not ours to change), or when the trim threshold
    given cannot be read.
    """
    tunables = dict(
        (name.strip(), value.strip())
        for name, _, value in (
            item.partition("=") for item in environ.get("GLIBC_TUNABLES", "").split(":")
        )
    )
    if "MALLOC_MMAP_THRESHOLD_" in environ or "glibc.malloc.mmap_threshold" in tunables:
        return None
    if not any(var in environ or name in tunables for var, name in _STOP_ADAPTING.items()):
        return None
    given = {
        text
        for text in (
            environ.get("MALLOC_TRIM_THRESHOLD_"),
            tunables.get("glibc.malloc.trim_threshold"),
        )
        if text is not None
    }
    if not given:
        return Thresholds(FIXED_MMAP_THRESHOLD, FIXED_TRIM_THRESHOLD)
    if len(given) > 1:
        return None
    try:
        trim = int(given.pop(), 0)
    except ValueError:
        return None
    return Thresholds(FIXED_MMAP_THRESHOLD, trim) if trim >= 0 else None


def _load_mallopt() -> Callable[[int, int], int] | None:
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        mallopt: Callable[[int, int], int] = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return None
    return mallopt


class _Scope:
    """Counts the tasks running in this process; sets the thresholds on the first and last."""

    def __init__(
        self, restore: Thresholds | None, mallopt: Callable[[int, int], int] | None
    ) -> None:
        self.restore = restore
        self.mallopt = mallopt if restore is not None else None
        self.lock = threading.Lock()
        self.active = 0

    def _set(self, mmap: int, trim: int) -> None:
        if self.mallopt is not None:
            self.mallopt(M_MMAP_THRESHOLD, mmap)
            self.mallopt(M_TRIM_THRESHOLD, trim)

    def enter(self) -> None:
        with self.lock:
            if self.active == 0:
                self._set(RAISED_MMAP_THRESHOLD, RAISED_TRIM_THRESHOLD)
            self.active += 1

    def exit(self) -> None:
        with self.lock:
            self.active -= 1
            if self.active == 0 and self.restore is not None:
                self._set(*self.restore)


def _scope_for(environ: Mapping[str, str]) -> _Scope:
    restore = fixed_thresholds(environ)
    return _Scope(restore, _load_mallopt() if restore is not None else None)


_SCOPE = _scope_for(os.environ)


def raises_threshold() -> bool:
    """Whether :func:`heap_buffers` changes anything in this process."""
    return _SCOPE.mallopt is not None


@contextmanager
def heap_buffers() -> Iterator[None]:
    """Serve buffers up to 32 MiB from the heap, and keep it, while the block runs.

    See the module: this changes something only in a process where glibc
    does not adapt its thresholds (``distributed``'s worker processes).
    """
    _SCOPE.enter()
    try:
        yield
    finally:
        _SCOPE.exit()


def in_heap_scope[T](func: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """Call ``func(*args, **kwargs)`` inside :func:`heap_buffers` (a task's function).

    Buffers freed after it returns (its arguments) are freed outside; see
    :func:`run_in_heap_scope` for a task whose arguments are computed inside.
    """
    if _SCOPE.mallopt is None:
        return func(*args, **kwargs)
    with heap_buffers():
        return func(*args, **kwargs)


def run_in_heap_scope(node: Any, keys: tuple[Any, ...], /, *values: Any) -> Any:
    """Run the dask task ``node`` on its dependencies' values inside :func:`heap_buffers`.

    ``keys`` are the keys of ``values``. The task's nested tasks (a block it
    computes itself) run, and their results are freed, inside the scope.
    """
    if _SCOPE.mallopt is None:
        return node(dict(zip(keys, values, strict=True)))
    with heap_buffers():
        return node(dict(zip(keys, values, strict=True)))
