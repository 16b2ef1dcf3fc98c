"""Resident-memory probes for the benchmark subprocesses (Linux ``/proc``).

The peak RSS of a writer is read from ``VmHWM`` in ``/proc/self/status`` after
resetting the high-water mark (writing ``5`` to ``/proc/self/clear_refs``) once
the data has been generated, so temporaries from data generation do not mask
the writer's own peak. Where the reset is unavailable the probes fall back to
``getrusage`` (whose maximum then includes data generation; see
:func:`reset_peak`).
"""

from __future__ import annotations

import resource
import sys

MIB = 1 << 20


def _status_kib(field: str) -> int | None:
    """Return a ``kB`` field of ``/proc/self/status`` in KiB, or None."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _rusage_maxrss_bytes(who: int) -> int:
    """Return ``ru_maxrss`` in bytes (Linux reports KiB, macOS bytes)."""
    value = resource.getrusage(who).ru_maxrss
    return value if sys.platform == "darwin" else value * 1024


def current_rss() -> int:
    """Return the current resident set size of this process in bytes.

    Returns
    -------
    int
        ``VmRSS`` in bytes, or the peak from ``getrusage`` if ``/proc`` is absent.
    """
    kib = _status_kib("VmRSS")
    return kib * 1024 if kib is not None else _rusage_maxrss_bytes(resource.RUSAGE_SELF)


def reset_peak() -> bool:
    """Reset the kernel's peak-RSS mark of this process to the current RSS.

    Returns
    -------
    bool
        True if the reset worked, so :func:`peak_rss` measures from now on.
    """
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as clear_refs:
            clear_refs.write("5")
    except OSError:
        return False
    return _status_kib("VmHWM") is not None


def peak_rss() -> int:
    """Return the peak resident set size of this process in bytes.

    Returns
    -------
    int
        ``VmHWM`` (peak since the last :func:`reset_peak`), or ``ru_maxrss``.
    """
    kib = _status_kib("VmHWM")
    return kib * 1024 if kib is not None else _rusage_maxrss_bytes(resource.RUSAGE_SELF)


def children_peak_rss() -> int:
    """Return the largest peak RSS of any finished child process, in bytes.

    Returns
    -------
    int
        ``ru_maxrss`` of ``RUSAGE_CHILDREN`` (0 when no child has exited).
    """
    return _rusage_maxrss_bytes(resource.RUSAGE_CHILDREN)
