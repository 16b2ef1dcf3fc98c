"""Test hook: make a job stall between the steps of taking, changing and releasing an array.

Races between jobs on one array (:mod:`shardpipe.journal.undo`) only show when
one job stops for a while at the wrong instant. Race tests make it stop
there on purpose: :func:`step` is called at each named point of
``acquire``, ``recover`` and ``release``, and of a positioned write of a
shard that undo records protect (the names are in :data:`STEPS`)
and does nothing unless a hook is set, at the cost of one global lookup.

Two ways to set it, both private to shardpipe's tests:

* the environment variable ``SHARDPIPE_JOURNAL_STALL``, read once when this
  module is imported: ``"acquire.claim=0.5,release.delete=1.5"`` sleeps
  that many seconds at those steps;
* the module attribute ``_HOOK``: a callable given the step's name, called
  at every step (a long-lived test process sets it before each run).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

STEPS = (
    "acquire.create",
    "acquire.read",
    "acquire.claim",
    "acquire.check",
    "acquire.replace",
    "acquire.unclaim",
    "acquire.recover",
    "recover.rollback",
    "recover.forget",
    "recover.cleanup",
    "update.recorded",
    "update.written",
    "release.read",
    "release.prune",
    "release.delete",
)
"""The points where a job may be made to stall, in the order a job meets them.

``acquire.create``: before creating the marker; ``acquire.read``: after
finding one, before reading it; ``acquire.claim``: a stale marker read,
before claiming it; ``acquire.check``: claimed, before checking that the
marker still names the stale job; ``acquire.replace``: before putting our
marker in its place; ``acquire.unclaim``: before dropping the claim;
``acquire.recover``: the array held, before recovering what earlier jobs
left; ``recover.rollback`` / ``recover.forget``: before rolling back one
undo record / before deleting it; ``recover.cleanup``: before removing
staging data and temporary files; ``update.recorded`` /
``update.written``: in a positioned write of a shard, its undo record
saved, before the shard's bytes change / after they changed, before the
record is removed; ``release.read``, ``release.prune``,
``release.delete``: before reading the marker to release it (and before
the job's last record, written meanwhile), before removing empty record
folders (the marker still the job's), before deleting it."""

ENVIRONMENT = "SHARDPIPE_JOURNAL_STALL"
"""The environment variable read once at import (``"<step>=<seconds>,..."``)."""


def _sleeper(spec: str) -> Callable[[str], None] | None:
    """The hook an environment value asks for (None when empty)."""
    stalls: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, seconds = item.partition("=")
        if name not in STEPS:
            raise ValueError(f"{ENVIRONMENT}: unknown step {name!r}; the steps are {STEPS}")
        stalls[name] = float(seconds)
    if not stalls:
        return None
    return lambda name: time.sleep(stalls.get(name, 0.0))


_HOOK: Callable[[str], None] | None = _sleeper(os.environ.get(ENVIRONMENT, ""))
"""Called with the name of each step reached, when set (see the module docstring)."""


def step(name: str) -> None:
    """Mark that the job reached step ``name`` (one of :data:`STEPS`)."""
    hook = _HOOK
    if hook is not None:
        hook(name)
