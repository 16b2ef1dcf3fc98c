"""Processes that write an OME-Zarr image (or an array) and kill themselves at a chosen key.

``python -m tests.support.kill_at_key_child WORKDIR POINTS_JSON``: for each
point ``[what, key, when]``, forks a process that writes ``what`` into
``WORKDIR/<number>.zarr`` (``ome``: the image and label image of
:func:`tests.support.writers_full_disk_child.write_ome`; ``array``: a
``to_sharded_zarr`` write at path ``a``) and sends itself ``SIGKILL`` right
after ``key`` is ``written`` (by zarr's store or by shardpipe's backend) or
``deleted``, the first time; prints one line of JSON per point: the target
and whether the process was killed (one that never met its key exits
normally, which the test reports). Forking from one process imports
shardpipe once for all the points.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np

ARRAY = np.random.default_rng(9).integers(0, 4000, (24, 40, 40), dtype=np.uint16)
ARRAY_LAYOUT = dict(path="a", shards=(8, 32, 32), chunks=(8, 16, 16))


def write_array(target: Path, **extra: Any) -> None:
    """The ``array`` write."""
    import shardpipe

    source = da.from_array(ARRAY, chunks=(5, 40, 40))
    shardpipe.to_sharded_zarr(source, str(target), **ARRAY_LAYOUT, **extra)


def _kill_after(cls: Any, name: str, when_key: str) -> None:
    """Make ``cls.name`` (first argument: a key) kill the process once it wrote ``when_key``."""
    original = getattr(cls, name)
    if name == "_set":

        async def patched_async(self: Any, key: str, *args: Any, **kwargs: Any) -> Any:
            result = await original(self, key, *args, **kwargs)
            if key == when_key:
                os.kill(os.getpid(), signal.SIGKILL)
            return result

        setattr(cls, name, patched_async)
        return

    def patched(self: Any, key: str, *args: Any, **kwargs: Any) -> Any:
        result = original(self, key, *args, **kwargs)
        if key == when_key:
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    setattr(cls, name, patched)


def _run_point(target: Path, what: str, key: str, when: str) -> None:
    """In a forked process: the write, killed at ``key``; exits 0 if it never meets it."""
    from shardpipe.storage.local.contained import ContainedLocalStore
    from shardpipe.storage.local.store import LocalShardStore
    from tests.support.writers_full_disk_child import write_ome

    if when == "written":
        for cls, name in ((ContainedLocalStore, "_set"), (ContainedLocalStore, "set_sync"),
                          (LocalShardStore, "put")):  # fmt: skip
            _kill_after(cls, name, key)
    else:
        for cls, name in ((ContainedLocalStore, "delete_sync"), (LocalShardStore, "delete")):
            _kill_after(cls, name, key)
    with dask.config.set(scheduler="threads"):
        if what == "ome":
            write_ome(target)
        else:
            write_array(target)


def main(work: str, points: str) -> None:
    """Run each point in a process forked from this one (imports done once, no thread yet)."""
    import json

    import shardpipe  # noqa: F401  (imported once, before the forks)
    import tests.support.writers_full_disk_child  # noqa: F401

    for number, (what, key, when) in enumerate(json.loads(points)):
        target = Path(work) / f"{number}.zarr"
        pid = os.fork()
        if pid == 0:
            try:
                _run_point(target, what, key, when)
            except BaseException as err:
                print(f"{type(err).__name__}: {err}", file=sys.stderr, flush=True)
                os._exit(1)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        print(json.dumps({"target": str(target), "killed": killed, "status": status}), flush=True)


if __name__ == "__main__":
    # through the module's own name: functions in a Dask graph are part of its name
    from tests.support.kill_at_key_child import main as run

    run(*sys.argv[1:3])
