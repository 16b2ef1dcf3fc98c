"""Ctrl-C during ``--workers N``: the command's to handle, not its workers'.

A terminal sends Ctrl-C (SIGINT) to every process of the foreground job: to
the ``shardpipe`` command and to the worker processes of its
``LocalCluster``. Each worker died of it part way through a task, with its
own tracebacks, and the command ended as a failed write (``CommClosedError``)
or as interrupted, depending on the instant. Now the workers ignore SIGINT
from their start (:func:`dask_setup`, ``distributed``'s preload hook, run in
each worker process as it starts): the command alone is interrupted, cancels
what is queued, waits for what runs, and closes the cluster, which ends the
workers. The futures the interrupted ``gather`` left behind end with
``distributed``'s ``AllExit``, which asyncio would log, each with its
traceback, as an exception nobody retrieved (:class:`QuietGathers`).
"""

from __future__ import annotations

import logging
import signal
from typing import Any

PRELOAD = __name__
"""The module the worker processes of ``--workers N`` run as they start."""


def dask_setup(worker: Any) -> None:
    """Ignore SIGINT in this worker process (``distributed``'s preload hook)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class QuietGathers(logging.Filter):
    """Drops asyncio's log records of an ``AllExit`` nobody retrieved (see the module)."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Whether ``record`` is kept: all but those of ``AllExit``."""
        from distributed.client import AllExit

        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, AllExit)
