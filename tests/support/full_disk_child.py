"""Writes into a small tmpfs that fills up, for ``tests/faults/test_update_full_disk.py``.

``python -m tests.support.full_disk_child WORKDIR SCENARIOS_JSON``: for each scenario
(``{"strategy": ..., "free_kib": ...}``) mounts a fresh 8 MiB tmpfs under
WORKDIR (the process must be allowed to mount: root, or run under
``unshare -rm``), writes an array, fills the file system until
``free_kib`` KiB are left, runs the write that is to fail, and reports on
one line of JSON per scenario what it left: the error and its notes, what
zarr-python reads in each shard right after the error (``old``, ``new``,
``same`` where the two do not differ, ``mixed`` or ``unreadable``), what ``verify`` finds, and
whether the same write with ``resume=True`` completes the array once space is freed.

Strategies: ``auto``, ``rewrite``, ``in_place``, ``append`` (a region
update of an existing array, every shard partly covered), ``append_dim``
(rows appended along the first axis, the last old shard partly filled: the
old data of the shards it adds is the fill value, and the array may have
its old or its new shape) and ``parts`` (a new array whose shards are
written in parts: staging files joined at the end; its old data is the
fill value).

The tmpfs, its filling and the loop over scenarios (:func:`tmpfs`,
:func:`fill`, :func:`report_each`), and the parent's side (:func:`launcher`,
:func:`run_child`) serve ``tests.support.writers_full_disk_child`` and its
test too.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dask
import dask.array as da
import numpy as np
import zarr

import shardpipe

if TYPE_CHECKING:
    from tests.support.fork_server import ForkServer

UPDATE = dict(shape=(64, 128, 128), shards=(32, 64, 64), chunks=(16, 32, 32))
REGION = (slice(8, 56), slice(0, 128), slice(0, 128))  # partly covers every shard
PARTS = dict(shape=(64, 96, 80), shards=(32, 48, 40), chunks=(8, 16, 20), blocks=(8, 48, 40))
GROWN = dict(old=(48, 128, 128), new=(88, 128, 128))  # appended along 0; 48 ends mid-shard


def _arrays(shape: tuple[int, ...], region: tuple[slice, ...] | None) -> tuple[Any, Any]:
    rng = np.random.default_rng(7)
    old = rng.integers(0, 2**16, shape).astype("uint16")
    new = old.copy()
    box = region or tuple(slice(0, n) for n in shape)
    new[box] = rng.integers(0, 2**16, new[box].shape).astype("uint16")
    return old, new


def launcher() -> list[str] | str:
    """The command prefix that lets a child mount a tmpfs, or why there is none."""
    if sys.platform != "linux":
        return "mounts a Linux tmpfs"
    if os.geteuid() == 0:
        return []
    if shutil.which("unshare"):
        probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True)
        if probe.returncode == 0:
            return ["unshare", "-rm"]
    return "cannot mount a tmpfs: not root, and `unshare -rm` is not permitted here"


def run_child(
    module: str, work: Path, scenarios: list[dict[str, Any]], server: ForkServer
) -> list[dict[str, Any]]:
    """In a test: run ``python -m module WORKDIR SCENARIOS_JSON`` (mounting); its reports.

    As root, the child is forked from ``server`` (shardpipe imported); otherwise a fresh
    interpreter under ``unshare -rm``. Skips the test, saying why, when no tmpfs can be
    mounted here.
    """
    import pytest

    from tests.support import REPOSITORY

    prefix = launcher()
    if isinstance(prefix, str):
        pytest.skip(prefix)
    args = [str(work), json.dumps(scenarios)]
    if not prefix:
        child = server.start(module, args, cwd=REPOSITORY)
        code, stdout, stderr = child.wait(timeout=900), child.stdout(), child.stderr()
    else:
        done = subprocess.run(
            [*prefix, sys.executable, "-m", module, *args],
            cwd=REPOSITORY,
            capture_output=True,
            text=True,
            timeout=900,
        )
        code, stdout, stderr = done.returncode, done.stdout, done.stderr
    assert code == 0, stderr[-3000:]
    print(f"\ntmpfs scenarios run {'as root' if not prefix else 'under unshare -rm'}")
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


@contextmanager
def tmpfs(where: Path) -> Iterator[Path]:
    """A fresh 8 MiB tmpfs mounted at ``where`` (made first), unmounted afterwards."""
    where.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(where: Path, free: int) -> None:
    """Fill the file system of ``where`` (a file ``filler`` in it) until ``free`` bytes are left."""
    stat = os.statvfs(where)
    available = stat.f_bavail * stat.f_frsize
    with open(where / "filler", "wb") as f:
        f.write(b"\1" * max(0, available - free))


def report_each(scenarios: str, scenario: Callable[[dict[str, Any]], dict[str, Any]]) -> int:
    """Run ``scenario`` on each of ``scenarios`` (JSON); print one line of JSON per scenario.

    A scenario that raises is reported with its traceback (``crash``).
    """
    dask.config.set(scheduler="threads")
    for item in json.loads(scenarios):
        try:
            result = scenario(item)
        except Exception:
            result = {**item, "crash": traceback.format_exc()}
        print(json.dumps(result), flush=True)
    return 0


def _shard_states(path: Path, shards: tuple[int, ...], old: Any, new: Any) -> dict[str, str]:
    """Each shard's data as zarr-python reads it, inside the array's shape as stored now."""
    array = zarr.open_array(str(path), mode="r")
    states = {}
    for index in np.ndindex(*(-(-n // s) for n, s in zip(old.shape, shards, strict=True))):
        box = tuple(
            slice(i * s, min((i + 1) * s, n))
            for i, s, n in zip(index, shards, array.shape, strict=True)
        )
        key = "c/" + "/".join(map(str, index))
        if any(b.start >= b.stop for b in box):
            continue  # beyond the stored shape: not part of the array
        try:
            got = np.asarray(array[box])
        except Exception:
            states[key] = "unreadable"
            continue
        if (old[box] == new[box]).all():
            states[key] = "same" if (got == old[box]).all() else "mixed"
        elif (got == old[box]).all():
            states[key] = "old"
        elif (got == new[box]).all():
            states[key] = "new"
        else:
            states[key] = "mixed"
    return states


def _write(strategy: str, path: Path, new: Any, resume: bool = False) -> None:
    if strategy == "parts":
        source = da.from_array(new, chunks=PARTS["blocks"])
        shardpipe.to_sharded_zarr(
            source,
            str(path),
            shards=PARTS["shards"],
            chunks=PARTS["chunks"],
            max_mem=100_000,
            resume=resume,
        )
    elif strategy == "append_dim":
        added = new[GROWN["old"][0] :]
        shardpipe.to_sharded_zarr(added, str(path), append_dim=0, resume=resume)
    else:
        shardpipe.to_sharded_zarr(
            new[REGION], str(path), region=REGION, write_strategy=strategy, resume=resume
        )


def scenario(work: Path, strategy: str, free_kib: int) -> dict[str, Any]:
    """Run one scenario in a tmpfs of its own; return what it left."""
    with tmpfs(work / f"{strategy}-{free_kib}") as where:
        path = where / "a.zarr"
        if strategy == "parts":
            old = np.zeros(PARTS["shape"], "uint16")
            _, new = _arrays(PARTS["shape"], None)
            shards = PARTS["shards"]
        elif strategy == "append_dim":
            _, new = _arrays(GROWN["new"], None)
            old = new.copy()
            old[GROWN["old"][0] :] = 0  # the fill value, where the array has not grown yet
            shards = UPDATE["shards"]
            shardpipe.to_sharded_zarr(
                new[: GROWN["old"][0]], str(path), shards=shards, chunks=UPDATE["chunks"]
            )
        else:
            old, new = _arrays(UPDATE["shape"], REGION)
            shards = UPDATE["shards"]
            shardpipe.to_sharded_zarr(old, str(path), shards=shards, chunks=UPDATE["chunks"])
        fill(where, free_kib * 1024)
        result: dict[str, Any] = {"strategy": strategy, "free_kib": free_kib, "error": None}
        try:
            _write(strategy, path, new)
        except Exception as err:
            result["error"] = type(err).__name__
            result["message"] = str(err)
            result["notes"] = list(getattr(err, "__notes__", []))
            failed = re.match(r"(?:writing|writing into) '([^']+)'", str(err))
            result["failed_key"] = failed[1] if failed else None
        try:
            zarr.open_array(str(path), mode="r")[...]  # the whole array, right after
            result["whole_read"] = "ok"
        except Exception as err:
            result["whole_read"] = f"{type(err).__name__}: {err}"
        result["shards"] = _shard_states(path, shards, old, new)
        result["verify"] = shardpipe.verify(str(path)).problems
        os.unlink(where / "filler")
        if result["error"] is not None or strategy != "append_dim":  # a finished append is done
            _write(strategy, path, new, resume=True)
        after = np.asarray(zarr.open_array(str(path), mode="r")[...])
        result["resumed"] = bool((after == new).all())
        return result


def main(work: str, scenarios: str) -> int:
    return report_each(scenarios, lambda s: scenario(Path(work), s["strategy"], s["free_kib"]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
