"""Pause Python's cyclic garbage collector while the client builds a graph.

Building a wave's graph makes a few hundred thousand objects in well under
a second (Dask's tasks for the source's blocks, the write's tasks, their
arguments), none of which is garbage. Each of them counts towards the next
run of the cyclic collector, and a full run walks every object the process
holds: the graphs of the waves in flight, the modules, the client. Measured
on the 1 PiB harness (``python -m benchmarks.wave_graphs``, waves of 19,842
keys): 0.6-1.1 s of a 1.3-1.8 s build went to the collector, 0.62-0.67 s with
it paused. Reference counting still frees everything as usual meanwhile; the
objects made are looked at once, by the first collection after the pause.

The pause is process-wide (the collector has no other kind), nests, and is
safe across threads: the collector runs again once the last pause ends, if
it was running when the first began.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["collector_paused"]

_lock = threading.Lock()
_depth = 0
_resume = False


@contextmanager
def collector_paused() -> Iterator[None]:
    """Run the block with Python's cyclic garbage collector paused (see the module)."""
    global _depth, _resume
    with _lock:
        if _depth == 0:
            _resume = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _resume:
                gc.enable()
