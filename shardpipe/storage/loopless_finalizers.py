"""Finalizers of file systems that can only fail, dropped.

adlfs registers, as it makes a file system, a ``weakref.finalize`` that closes
its client with ``fsspec.asyn.sync(self.loop, ...)``. A file system zarr makes
(asynchronous, its loop given later) has no loop yet then: the finalizer holds
``None`` and, when the file system is collected (at the latest when the process
exits), raises ``RuntimeError: Loop is not running``, printed as a traceback
after a command that succeeded. :func:`drop_loopless_finalizers` detaches those;
the client's connections close with the process, as they would have then.
"""

from __future__ import annotations

import weakref
from typing import Any


def drop_loopless_finalizers(file_system: Any) -> None:
    """Detach ``file_system``'s finalizers that would run ``fsspec.asyn.sync`` on no loop."""
    try:
        from fsspec.asyn import sync
    except ImportError:
        return
    registry: Any = getattr(weakref.finalize, "_registry", {})  # CPython's, since 3.4
    for finalizer in list(registry):
        found = finalizer.peek()
        if found is not None and found[0] is file_system and found[1] is sync:
            arguments = found[2]
            if arguments and arguments[0] is None:
                finalizer.detach()
