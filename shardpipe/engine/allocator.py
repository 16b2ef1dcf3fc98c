"""Keeping glibc's allocator from holding on to the memory a write has freed.

A write allocates and frees blocks of megabytes all the time: source blocks,
shard canvases, encoded chunks. glibc's ``malloc`` serves a request of at
least its *mmap threshold* with a mapping of its own, given back to the
system when freed. But the threshold moves: each time such a mapping is freed,
glibc raises the threshold to its size (up to 32 MiB), so the next blocks of
that size come from its heaps, where freed memory is kept for reuse, on every
thread's heap (arena) separately. A rechunk of slabs under ``max_mem="64MB"``
peaked at +212-235 MiB of resident memory for a traced heap of about 68 MB:
what the threads' arenas kept, not what the write held.

:func:`settle_allocator` fixes the threshold (``mallopt(M_MMAP_THRESHOLD)``),
which also stops glibc from moving it: blocks of at least
``shardpipe.memory.mmap-threshold`` bytes (default :data:`MMAP_THRESHOLD`,
4 MiB) are then always mapped and given back when freed, while the many
smaller buffers of decoding and encoding (1-2 MiB) stay on the heaps, where
reusing them costs no system call. The same rechunk then peaked at +73-77
MiB. It is a setting of the whole process, made by the first write that runs
in it (on a ``distributed`` worker, by its first shard task) and again when
the configured value changes; ``dask.config.set({"shardpipe.memory.mmap-threshold":
None})`` leaves the allocator as it is. Elsewhere than on glibc (macOS,
Windows, musl) nothing is done.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys
import threading
from collections.abc import Callable

import dask.config
from dask.utils import parse_bytes

__all__ = ["MMAP_THRESHOLD", "mmap_threshold", "settle_allocator"]

MMAP_THRESHOLD = 4 << 20
"""Blocks of this many bytes or more are mapped alone and given back when freed."""

_M_MMAP_THRESHOLD = -3
"""glibc's ``mallopt`` parameter number for the mmap threshold (``malloc.h``)."""

_GLIBC_MOST = 32 << 20
"""The largest mmap threshold glibc accepts on 64-bit systems (``HEAP_MAX_SIZE / 2``)."""

_lock = threading.Lock()
_settled: int | None = None


def mmap_threshold() -> int | None:
    """The configured threshold in bytes, or None to leave the allocator alone.

    Raises
    ------
    ValueError
        If ``shardpipe.memory.mmap-threshold`` is not a size (an int of bytes
        or a string such as ``"4MiB"``) between 128 KiB and 32 MiB, or None.
    """
    value = dask.config.get("shardpipe.memory.mmap-threshold", MMAP_THRESHOLD)
    if value is None or value is False:
        return None
    try:
        size = parse_bytes(value) if isinstance(value, str) else value
    except ValueError:
        size = None
    if isinstance(size, bool) or not isinstance(size, int) or not 128 << 10 <= size <= _GLIBC_MOST:
        raise ValueError(
            f"dask config shardpipe.memory.mmap-threshold must be a size from 128KiB to 32MiB "
            f"(e.g. '4MiB'), or None to leave the allocator alone; got {value!r}"
        )
    return size


@functools.cache
def _mallopt() -> Callable[[int, int], int] | None:
    """glibc's ``mallopt``, or None where the C library is another (looked up once)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        version = libc.gnu_get_libc_version  # only glibc has it
    except (OSError, AttributeError):
        return None
    del version
    function = libc.mallopt
    function.argtypes = [ctypes.c_int, ctypes.c_int]
    function.restype = ctypes.c_int
    set_option: Callable[[int, int], int] = function
    return set_option


def settle_allocator() -> int | None:
    """Fix glibc's mmap threshold as configured (see the module); return it.

    Cheap after the first call in a process: it reads the configuration and
    compares. Returns None when the configuration says to leave the allocator
    alone or the C library is not glibc.
    """
    global _settled
    threshold = mmap_threshold()
    if threshold is None or threshold == _settled:
        return threshold
    with _lock:
        if threshold != _settled:
            mallopt = _mallopt()
            if mallopt is None or mallopt(_M_MMAP_THRESHOLD, threshold) != 1:
                return None
            _settled = threshold
    return threshold
