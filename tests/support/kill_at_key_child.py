"""Processes that write an OME-Zarr image (or an array) and are killed at a chosen key.

``python -m tests.support.kill_at_key_child WORKDIR POINTS_JSON``: for each
point ``[what, key, when]``, forks a process that writes ``what`` into
``WORKDIR/<number>.zarr`` (``ome``: the image and label image of
:func:`tests.support.writers_full_disk_child.write_ome`; ``array``: a
``to_sharded_zarr`` write at path ``a``; the other jobs of :func:`_run_point`)
and stops it at ``key``, the first time it is met:

* ``written``: right after ``key`` is written (by zarr's store or by
  shardpipe's backend);
* ``deleted``: right after ``key`` is deleted;
* ``partial``: inside zarr's own write of ``key``, its temporary file
  (``zarr.<uuid>.partial`` beside a ``zarr.json``) written and not yet renamed.

The stop is not a matter of timing. Every function that changes a file
(zarr's ``_put``, ``_delete``, ``_delete_dir``, ``_clear``; the backend's
writes, deletes and removals) passes a gate: once the key is met, no write
starts any more (a thread that tries waits for ever), the writes already
under way run to their end, and when none is left the process tells this
one through a pipe and waits. This one then sends it ``SIGKILL``. So what the
killed process leaves is the key's step, whole, and no write cut in two by
the kill (other than the one a ``partial`` point stops on purpose); which
other writes of the computation's threads came before it is the write's own
order. Prints one line of JSON per point: the target and whether the process
was killed (one that never met its key exits by itself, which the test
reports). Forking from one process imports shardpipe once for all the points.

zarr's functions are patched in ``zarr.storage._local``, where its
``LocalStore`` looks them up (zarr-python 3.x).
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import dask
import dask.array as da
import numpy as np

if TYPE_CHECKING:
    from tests.support.fork_server import ForkServer

ARRAY = np.random.default_rng(9).integers(0, 4000, (24, 40, 40), dtype=np.uint16)
ARRAY_LAYOUT = dict(path="a", shards=(8, 32, 32), chunks=(8, 16, 16))

SECONDS = 120.0
"""How long the parent waits for a process to meet its key or end."""


def write_array(target: Path, **extra: Any) -> None:
    """The ``array`` write."""
    import shardpipe

    source = da.from_array(ARRAY, chunks=(5, 40, 40))
    shardpipe.to_sharded_zarr(source, str(target), **ARRAY_LAYOUT, **extra)


class Gate:
    """Lets writes through until the key is met, then none; tells the parent once all ended."""

    def __init__(self, signal_fd: int) -> None:
        self.signal_fd = signal_fd
        self.changed = threading.Condition()
        self.under_way = 0
        self.met = False

    def enter(self) -> None:
        """Before a write: wait for ever if the key was met, else count the write."""
        with self.changed:
            while self.met:
                self.changed.wait()
            self.under_way += 1

    def leave(self, met: bool) -> None:
        """After a write (``met``: it was the key's); the last one out after the key signals."""
        with self.changed:
            self.under_way -= 1
            self.met = self.met or met
            if self.met and self.under_way == 0:
                os.write(self.signal_fd, b"k")

    def stop(self) -> NoReturn:
        """Stop this thread here, in the middle of its write: the key is met."""
        self.leave(True)
        threading.Event().wait()
        raise AssertionError("unreachable")


def _gated(gate: Gate, original: Callable[..., Any], is_key: Callable[..., bool]) -> Any:
    """``original`` through the gate; ``is_key(*args)``: whether the call writes the key."""

    def gated(*args: Any, **kwargs: Any) -> Any:
        gate.enter()
        met = False
        try:
            result = original(*args, **kwargs)
            met = is_key(*args)
            return result
        finally:
            gate.leave(met)
            if met:
                threading.Event().wait()  # the parent kills the process now

    return gated


def _arm(gate: Gate, target: Path, key: str, when: str) -> None:
    """Patch every function that changes a file in ``target`` to pass ``gate``."""
    import zarr.storage._local as zarr_local

    from shardpipe.storage.local.store import LocalShardStore

    path = target / key

    def never(*_: Any) -> bool:
        return False

    def zarr_path(at: Path, *_: Any) -> bool:
        return Path(at) == path

    def backend_key(_: Any, at: str, *__: Any) -> bool:
        return at == key

    for name in ("_put", "_delete", "_delete_dir", "_clear"):
        met = {"_put": when == "written", "_delete": when == "deleted"}.get(name, False)
        setattr(
            zarr_local, name, _gated(gate, getattr(zarr_local, name), zarr_path if met else never)
        )
    for name in ("_publish", "delete", "_change", "link", "write_part", "copy_part",
                 "begin_parts", "abort_parts", "discard_staging", "prune"):  # fmt: skip
        met = {"_publish": when == "written", "delete": when == "deleted"}.get(name, False)
        original = getattr(LocalShardStore, name)
        setattr(LocalShardStore, name, _gated(gate, original, backend_key if met else never))
    if when == "partial":
        move = zarr_local._move_with_retry

        def move_unless_key(tmp: Path, at: Path, *args: Any) -> None:
            if Path(at) == path:
                gate.stop()
            move(tmp, at, *args)

        zarr_local._move_with_retry = move_unless_key


def _prepare(target: Path, what: str) -> None:
    """What a job of kind ``what`` starts from, made before the gate is armed."""
    if what == "update":
        write_array(target)
    elif what == "migration":
        from tests.support import DRAFT_FIXTURES

        shutil.copytree(DRAFT_FIXTURES / "hierarchy", target)
    elif what == "rechunk":
        from tests.support.rechunk_crash_child import slabs

        slabs(_rechunk_source(target))


def _rechunk_source(target: Path) -> Path:
    """The source array of the ``rechunk`` point, beside its target."""
    return target.with_name(f"{target.name}-source")


def write_precomputed(target: Path) -> None:
    """The ``precomputed`` write: a small sharded volume."""
    import shardpipe

    source = da.from_array(ARRAY[..., None], chunks=(8, 40, 40, 1))
    shardpipe.to_neuroglancer_precomputed(
        source,
        str(target),
        resolution=(1, 1, 1),
        chunk_size=(8, 8, 8),
        sharding={
            "@type": "neuroglancer_uint64_sharded_v1",
            "preshift_bits": 1,
            "hash": "identity",
            "minishard_bits": 1,
            "shard_bits": 2,
            "minishard_index_encoding": "gzip",
            "data_encoding": "gzip",
        },
    )


def _run_point(target: Path, what: str, key: str, when: str, signal_fd: int) -> None:
    """In a forked process: the job, stopped at ``key``; returns if it never meets it.

    ``what``: ``ome``, ``array`` (a write of a new array at ``a``), ``update``
    (a region write into that array), ``precomputed``, ``rechunk`` (a two-pass
    rechunk of slabs, :mod:`tests.support.rechunk_crash_child`) or
    ``migration`` (the draft fixture migrated in place).
    """
    import shardpipe
    from tests.support.writers_full_disk_child import write_ome

    _prepare(target, what)
    _arm(Gate(signal_fd), target, key, when)
    with dask.config.set(scheduler="threads"):
        if what == "ome":
            write_ome(target)
        elif what == "update":
            patch = da.from_array(ARRAY[:8] + 1, chunks=(8, 20, 20))
            shardpipe.to_sharded_zarr(
                patch, str(target), path="a", region=(slice(0, 8), slice(None), slice(None))
            )
        elif what == "precomputed":
            write_precomputed(target)
        elif what == "rechunk":
            from tests.support.rechunk_crash_child import LAYOUT

            shardpipe.rechunk(str(_rechunk_source(target)), str(target), **LAYOUT)
        elif what == "migration":
            shardpipe.migrate(str(target))
        else:
            write_array(target)


def _kill_when_met(pid: int, read_fd: int) -> bool:
    """Wait for the process to meet its key (then kill it) or to end; whether it was killed."""
    ready, _, _ = select.select([read_fd], [], [], SECONDS)
    if ready and os.read(read_fd, 1) == b"k":
        os.kill(pid, signal.SIGKILL)
    elif not ready:  # stuck: kill it, and say so
        os.kill(pid, signal.SIGKILL)
        print(f"point process {pid} neither met its key nor ended", file=sys.stderr, flush=True)
        os.waitpid(pid, 0)
        return False
    _, status = os.waitpid(pid, 0)
    return os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL


def kill_at_keys(
    work: Path, points: Sequence[Sequence[str]], timeout: float, server: ForkServer
) -> list[dict[str, Any]]:
    """In a test: run this module on ``points`` in a child forked from ``server``; one
    result per point.

    Each result is ``{"target": ..., "killed": ...}`` (see the module).
    """
    import json

    from tests.support import REPOSITORY

    args = [str(work), json.dumps(points)]
    child = server.start("tests.support.kill_at_key_child", args, cwd=REPOSITORY)
    assert child.wait(timeout=timeout) == 0, child.stderr()[-3000:]
    found = [json.loads(line) for line in child.stdout().splitlines() if line.startswith("{")]
    assert len(found) == len(points), (child.stdout(), child.stderr()[-3000:])
    return found


def main(work: str, points: str) -> None:
    """Run each point in a process forked from this one (imports done once, no thread yet)."""
    import json

    import shardpipe  # noqa: F401  (imported once, before the forks)
    import tests.support.writers_full_disk_child  # noqa: F401

    for number, (what, key, when) in enumerate(json.loads(points)):
        target = Path(work) / f"{number}.zarr"
        read_fd, signal_fd = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_fd)
            try:
                _run_point(target, what, key, when, signal_fd)
            except BaseException as err:
                print(f"{type(err).__name__}: {err}", file=sys.stderr, flush=True)
                os._exit(1)
            os._exit(0)
        os.close(signal_fd)  # the process's end closes the pipe: the read returns b""
        try:
            killed = _kill_when_met(pid, read_fd)
        finally:
            os.close(read_fd)
        print(json.dumps({"target": str(target), "killed": killed}), flush=True)


if __name__ == "__main__":
    # through the module's own name: functions in a Dask graph are part of its name
    from tests.support.kill_at_key_child import main as run

    run(*sys.argv[1:3])
