"""A long-lived process that runs jobs on arrays when told, for the stall-injected race test.

``python -m tests.support.race_worker [SOCKET]``: reads one JSON command per line on
stdin, runs it, answers one JSON line on stdout; given the name of a listening Unix
socket (an abstract one starts with ``@``), it connects there and reads and answers on
the connection instead (a worker forked by :class:`tests.support.fork_server.ForkServer`
has no pipes to its test). Importing shardpipe, Dask and zarr takes seconds; a worker
pays it once for many runs, or not at all when it is forked.

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
import socket
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


def main(address: str | None = None) -> int:
    dask.config.set(scheduler="threads")
    if address is None:
        commands, answers = sys.stdin, sys.stdout
    else:
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        connection.connect(address.replace("@", "\0", 1) if address[0] == "@" else address)
        commands = answers = connection.makefile("rw")
    print(json.dumps({"ready": os.getpid()}), file=answers, flush=True)
    for line in commands:
        print(json.dumps(run(json.loads(line))), file=answers, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:2]))
