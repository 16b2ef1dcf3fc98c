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
trims it again.

Where glibc adapts its thresholds (any process but a nanny's workers), the
adaptation costs memory instead: once the threshold has climbed, blocks of
megabytes come from per-thread heaps that keep what is freed. A rechunk of
slabs under ``max_mem="64MB"`` peaked at +212-246 MiB of resident memory
for about 68 MB its tasks held. With ``shardpipe.memory.mmap-threshold`` set
(for example to ``"16MiB"``, :data:`SUGGESTED_MMAP_THRESHOLD`), the first of
shardpipe's tasks fixes glibc's mmap threshold there, which also ends the
adaptation for the life of the process: blocks of that size or more are
mapped and given back when freed, smaller buffers stay on the heaps for
reuse. The same rechunk then peaked at +66-77 MiB, but took 15-30% longer
(3.0-3.3 s against 2.4-2.5 s), each block of 16 MiB mapped afresh; at 256MB
the slabs gained no memory and lost 15% of their speed, while the time
series and camera frames of ``benchmarks/`` peaked 10-30% lower at the same
speed. The trade is the user's, so it is off by default (None: the
threshold is left where it is).

Threads keep their own heaps (glibc's *arenas*, up to eight per core), and each
keeps the most it ever held. :func:`share_arenas` limits them to
:data:`SHARED_ARENAS` for threads that start afterwards, so that what one
thread frees another reuses. It is a setting of the whole process, and only
threads that have not allocated yet follow it, so shardpipe's command line makes
it as it starts, in the process it owns; a program that imports shardpipe
chooses for itself (``MALLOC_ARENA_MAX=2`` in its environment does the same).
The slab rechunk above then peaked at +75-93 MiB under ``max_mem="64MB"``,
and a time series at +93 MiB where it took +160; the time series ran as fast,
the slabs up to about 15% slower (``benchmarks/RESULTS.md``, 21d).

Nothing changes where someone chose the mmap threshold
(``MALLOC_MMAP_THRESHOLD_`` or the ``glibc.malloc.mmap_threshold`` tunable:
setting it is also the way to opt out of both), or on other C libraries.
"""

from __future__ import annotations

import ctypes
import os
import platform
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, NamedTuple

import dask.config
from dask.utils import parse_bytes

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
"""``mallopt`` parameter numbers (glibc's ``malloc.h``)."""

FIXED_MMAP_THRESHOLD = 128 * 1024
FIXED_TRIM_THRESHOLD = 128 * 1024
"""glibc's thresholds when it does not adapt them and nobody chose them."""

RAISED_MMAP_THRESHOLD = 4 * 1024 * 1024 * ctypes.sizeof(ctypes.c_long)
"""The largest mmap threshold glibc's adaptation reaches (``DEFAULT_MMAP_THRESHOLD_MAX``)."""

RAISED_TRIM_THRESHOLD = 2 * RAISED_MMAP_THRESHOLD
"""The trim threshold glibc's adaptation sets with it."""

SUGGESTED_MMAP_THRESHOLD = 16 << 20
"""A value of ``shardpipe.memory.mmap-threshold`` for small budgets (see the module)."""

SHARED_ARENAS = 2
"""The heaps (glibc arenas) that the threads of a ``shardpipe`` command share."""

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
    tunables = _tunables(environ)
    if _chosen(environ, tunables) or _adapts(environ, tunables):
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


def _tunables(environ: Mapping[str, str]) -> dict[str, str]:
    return dict(
        (name.strip(), value.strip())
        for name, _, value in (
            item.partition("=") for item in environ.get("GLIBC_TUNABLES", "").split(":")
        )
    )


def _chosen(environ: Mapping[str, str], tunables: Mapping[str, str]) -> bool:
    """Whether the mmap threshold was chosen for the process (then it is not ours to change)."""
    return "MALLOC_MMAP_THRESHOLD_" in environ or "glibc.malloc.mmap_threshold" in tunables


def _adapts(environ: Mapping[str, str], tunables: Mapping[str, str]) -> bool:
    """Whether glibc adapts the thresholds in a process started with ``environ``."""
    stopped = any(var in environ or name in tunables for var, name in _STOP_ADAPTING.items())
    return not stopped and not _chosen(environ, tunables)


def mmap_threshold() -> int | None:
    """The configured threshold to fix where glibc adapts it, or None (default) to leave it.

    Raises
    ------
    ValueError
        If ``shardpipe.memory.mmap-threshold`` is not a size (an int of bytes
        or a string such as ``"16MiB"``) between 128 KiB and 32 MiB, or None.
    """
    value = dask.config.get("shardpipe.memory.mmap-threshold", None)
    if value is None or value is False:
        return None
    try:
        size = parse_bytes(value) if isinstance(value, str) else value
    except ValueError:
        size = None
    if (
        isinstance(size, bool)
        or not isinstance(size, int)
        or not FIXED_MMAP_THRESHOLD <= size <= RAISED_MMAP_THRESHOLD
    ):
        raise ValueError(
            "dask config shardpipe.memory.mmap-threshold must be a size from 128KiB to "
            f"32MiB (e.g. '16MiB'), or None to leave the allocator alone; got {value!r}"
        )
    return size


def _load_mallopt() -> Callable[[int, int], int] | None:
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        mallopt: Callable[[int, int], int] = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return None
    return mallopt


class _Scope:
    """Counts the tasks running in this process; sets the thresholds on the first and last.

    ``restore``: the fixed thresholds to raise while tasks run and put back
    after (a nanny's worker). ``adapting``: glibc adapts them, and the first
    task fixes the mmap threshold as configured, for good.
    """

    def __init__(
        self,
        restore: Thresholds | None,
        mallopt: Callable[[int, int], int] | None,
        *,
        adapting: bool = False,
    ) -> None:
        self.restore = restore
        self.adapting = adapting and restore is None
        self.mallopt = mallopt if restore is not None or self.adapting else None
        self.lock = threading.Lock()
        self.active = 0
        self.settled: int | None = None

    def _set(self, mmap: int, trim: int) -> None:
        if self.mallopt is not None:
            self.mallopt(M_MMAP_THRESHOLD, mmap)
            self.mallopt(M_TRIM_THRESHOLD, trim)

    def _settle(self) -> None:
        threshold = mmap_threshold()
        if threshold is None or threshold == self.settled or self.mallopt is None:
            return
        if self.mallopt(M_MMAP_THRESHOLD, threshold) == 1:
            self.settled = threshold

    def enter(self) -> None:
        with self.lock:
            if self.active == 0:
                if self.restore is not None:
                    self._set(RAISED_MMAP_THRESHOLD, RAISED_TRIM_THRESHOLD)
                elif self.adapting:
                    self._settle()
            self.active += 1

    def exit(self) -> None:
        with self.lock:
            self.active -= 1
            if self.active == 0 and self.restore is not None:
                self._set(*self.restore)


def _scope_for(environ: Mapping[str, str]) -> _Scope:
    restore = fixed_thresholds(environ)
    adapting = _adapts(environ, _tunables(environ))
    mallopt = _load_mallopt() if restore is not None or adapting else None
    return _Scope(restore, mallopt, adapting=adapting)


_SCOPE = _scope_for(os.environ)


def raises_threshold() -> bool:
    """Whether :func:`heap_buffers` may change glibc's thresholds in this process.

    True where they are fixed (it raises them while tasks run) and where glibc
    adapts them (it fixes the mmap threshold once ``shardpipe.memory.mmap-threshold``
    is set); False where they were chosen, or off glibc.
    """
    return _SCOPE.mallopt is not None


@contextmanager
def heap_buffers() -> Iterator[None]:
    """Set glibc's thresholds for shardpipe's tasks while the block runs (see the module).

    In a process where glibc does not adapt them (``distributed``'s worker
    processes) buffers up to 32 MiB come from the heap, and it keeps them,
    while the block runs; where glibc adapts them, the first block fixes the
    mmap threshold if ``shardpipe.memory.mmap-threshold`` is set.
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


def share_arenas(environ: Mapping[str, str] = os.environ, count: int = SHARED_ARENAS) -> bool:
    """Let threads that start from now on share ``count`` glibc heaps; whether it was set.

    Nothing is set where the environment chose (``MALLOC_ARENA_MAX`` or the
    ``glibc.malloc.arena_max`` tunable) or off glibc. Threads that have
    allocated already keep their heaps: call it before a process starts any
    (see the module).
    """
    if "MALLOC_ARENA_MAX" in environ or "glibc.malloc.arena_max" in _tunables(environ):
        return False
    mallopt = _load_mallopt()
    return mallopt is not None and mallopt(M_ARENA_MAX, count) == 1
