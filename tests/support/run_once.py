"""Work that a module's tests share, done once for the whole test run.

A module-scoped fixture runs again each time an xdist worker comes back to its
module (``--dist worksteal`` hands a worker tests of several modules in turn),
and once more on every worker: a fixture that runs a child process for a
minute cost the suite several minutes. :func:`once_per_run` runs such work once
per run, whichever worker asks first, and hands every worker its JSON result.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable
from typing import Any

import pytest


def once_per_run(factory: pytest.TempPathFactory, name: str, compute: Callable[[], Any]) -> Any:
    """``compute()`` run once for this test run, its JSON-able result shared by the workers.

    Parameters
    ----------
    factory : pytest.TempPathFactory
        The session's ``tmp_path_factory``: under xdist the parent of its base folder
        belongs to this run and is shared by its workers; without xdist the base
        folder itself is used, so that a result never outlives its run.
    name : str
        What the work is, unique in the suite (a file name).
    compute : callable
        The work; it may skip (``pytest.skip``), which each asker then does itself.

    Returns
    -------
    object
        What ``compute`` returned, through JSON (tuples come back as lists).
    """
    base = factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    result = shared / f"run-once-{name}.json"
    with open(shared / f"run-once-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the other worker waits rather than redoes it
        if result.exists():
            return json.loads(result.read_text())
        value = compute()
        result.write_text(json.dumps(value))
        return json.loads(result.read_text())
