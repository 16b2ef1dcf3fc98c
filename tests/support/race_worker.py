"""A long-lived process that runs jobs on arrays when told, for the stall-injected race test.

``python -m tests.support.race_worker``: reads one JSON command per line on stdin,
runs it, answers one JSON line on stdout. Importing shardpipe, Dask and
zarr takes a second or two; a worker pays it once for many runs.

A command::

    {"path": ..., "action": "update" | "repair", "region": [[start, stop], ...],
     "value": int, "stall": step name or null, "seconds": float,
     "delay": float, "go": path of a file to wait for}

The worker sets :data:`shardpipe.journal.stalls._HOOK` so that it sleeps
``seconds`` the first time it reaches ``stall``, waits until ``go`` exists,
sleeps ``delay``, then runs the job. The answer::

    {"outcome": "ok" | "conflict" | "error", "error": str, "steps": [names reached]}

``conflict`` is a :class:`~shardpipe.errors.JobConflictError`; ``error`` is
anything else (a raw ``OSError`` among them), with its traceback.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from typing import Any

import dask
import numpy as np

import shardpipe
from shardpipe.journal import stalls as journal_stalls


def _hook(stall: str | None, seconds: float, reached: list[str]) -> Any:
    def hook(name: str) -> None:
        if name == stall and name not in reached:
            time.sleep(seconds)
        reached.append(name)

    return hook


def run(command: dict[str, Any]) -> dict[str, Any]:
    """Run one command; return the answer."""
    reached: list[str] = []
    journal_stalls._HOOK = _hook(command["stall"], command["seconds"], reached)
    try:
        while not os.path.exists(command["go"]):
            time.sleep(0.001)
        time.sleep(command["delay"])
        if command["action"] == "repair":
            shardpipe.repair(command["path"], storage_options={"fsync": False})
        else:
            region = tuple(slice(a, b) for a, b in command["region"])
            shape = tuple(b - a for a, b in command["region"])
            shardpipe.to_sharded_zarr(
                np.full(shape, command["value"], dtype="uint16"),
                command["path"],
                region=region,
                write_strategy="in_place",
                storage_options={"fsync": False},
            )
        return {"outcome": "ok", "error": "", "steps": reached}
    except shardpipe.JobConflictError as err:
        return {"outcome": "conflict", "error": str(err), "steps": reached}
    except Exception:
        return {"outcome": "error", "error": traceback.format_exc(), "steps": reached}
    finally:
        journal_stalls._HOOK = None


def main() -> int:
    dask.config.set(scheduler="threads")
    print(json.dumps({"ready": os.getpid()}), flush=True)
    for line in sys.stdin:
        print(json.dumps(run(json.loads(line))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
