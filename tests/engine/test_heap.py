"""Large buffers from the heap while shardpipe's tasks run (shardpipe.heap)."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import textwrap
import threading
from typing import Any

import dask
import pytest

from shardpipe.engine import heap
from shardpipe.engine.heap import (
    FIXED_MMAP_THRESHOLD,
    FIXED_TRIM_THRESHOLD,
    M_MMAP_THRESHOLD,
    M_TRIM_THRESHOLD,
    RAISED_MMAP_THRESHOLD,
    RAISED_TRIM_THRESHOLD,
    SHARED_ARENAS,
    SUGGESTED_MMAP_THRESHOLD,
    Thresholds,
    _Scope,
    fixed_thresholds,
    mmap_threshold,
    share_arenas,
)

MiB = 2**20

FIXED = Thresholds(FIXED_MMAP_THRESHOLD, FIXED_TRIM_THRESHOLD)


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, None),  # glibc adapts the thresholds itself
        ({"MALLOC_TRIM_THRESHOLD_": "65536"}, FIXED._replace(trim=65536)),  # distributed's
        ({"MALLOC_TOP_PAD_": "0"}, FIXED),
        ({"GLIBC_TUNABLES": "glibc.malloc.mmap_max=9:glibc.foo=1"}, FIXED),
        ({"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=0x100"}, FIXED._replace(trim=256)),
        ({"MALLOC_TRIM_THRESHOLD_": "0", "MALLOC_MMAP_THRESHOLD_": "4096"}, None),  # chosen
        ({"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1:glibc.malloc.mmap_threshold=9"}, None),
        ({"MALLOC_TRIM_THRESHOLD_": "lots"}, None),  # unreadable: what glibc does is unclear
    ],
)
def test_fixed_thresholds(environ: dict[str, str], expected: Thresholds | None) -> None:
    assert fixed_thresholds(environ) == expected


def test_scope_raises_on_the_first_task_and_restores_after_the_last() -> None:
    calls: list[tuple[int, int]] = []
    scope = _Scope(FIXED, lambda param, value: calls.append((param, value)) or 1)
    scope.enter()
    entered = threading.Event()
    release = threading.Event()

    def other_task() -> None:
        scope.enter()
        entered.set()
        release.wait(10)
        scope.exit()

    thread = threading.Thread(target=other_task)
    thread.start()
    assert entered.wait(10)
    scope.exit()  # the other task still runs: the threshold stays raised
    raised = [(M_MMAP_THRESHOLD, RAISED_MMAP_THRESHOLD), (M_TRIM_THRESHOLD, RAISED_TRIM_THRESHOLD)]
    assert calls == raised
    release.set()
    thread.join(10)
    assert calls == [*raised, (M_MMAP_THRESHOLD, FIXED.mmap), (M_TRIM_THRESHOLD, FIXED.trim)]


def test_scope_changes_nothing_where_the_threshold_was_chosen() -> None:
    calls: list[tuple[int, int]] = []
    scope = _Scope(None, lambda param, value: calls.append((param, value)) or 1)
    scope.enter()
    scope.exit()
    assert calls == [] and scope.active == 0


def test_scope_fixes_the_threshold_where_glibc_adapts_it_once_and_for_good() -> None:
    calls: list[tuple[int, int]] = []
    scope = _Scope(None, lambda param, value: calls.append((param, value)) or 1, adapting=True)
    scope.enter()  # not configured: left alone
    scope.exit()
    assert calls == []
    with dask.config.set({"shardpipe.memory.mmap-threshold": "16MiB"}):
        for _ in range(3):
            scope.enter()
            scope.exit()
    assert calls == [(M_MMAP_THRESHOLD, SUGGESTED_MMAP_THRESHOLD)]
    with dask.config.set({"shardpipe.memory.mmap-threshold": "4MiB"}):
        scope.enter()
        scope.exit()
    scope.enter()
    scope.exit()
    assert calls[1:] == [(M_MMAP_THRESHOLD, 4 * MiB)]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        (False, None),
        ("4MiB", 4 * MiB),
        ("128KiB", 128 * 1024),
        (32 * MiB, 32 * MiB),
        (6_000_000, 6_000_000),
    ],
)
def test_the_threshold_is_read_from_the_config(value: Any, expected: int | None) -> None:
    with dask.config.set({"shardpipe.memory.mmap-threshold": value}):
        assert mmap_threshold() == expected


def test_by_default_the_threshold_is_left_alone() -> None:
    assert mmap_threshold() is None


@pytest.mark.parametrize("value", [True, "big", "64KiB", "33MiB", -1, 1.5, [4]])
def test_a_bad_threshold_is_refused_naming_the_setting_and_the_fix(value: Any) -> None:
    bad = {"shardpipe.memory.mmap-threshold": value}
    fix = r"shardpipe\.memory\.mmap-threshold.*'16MiB'.*None"
    with dask.config.set(bad), pytest.raises(ValueError, match=fix):
        mmap_threshold()


HEAP_ALONE = textwrap.dedent(
    """
    import importlib.util, sys

    # the module alone, without the imports of the package (seconds of CPU a child)
    _spec = importlib.util.spec_from_file_location("heap", sys.argv.pop())
    heap = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(heap)
    """
)
"""What a child runs first: shardpipe.engine.heap, loaded from the file ``_child`` passes."""


def _child(code: str, *args: str, env: dict[str, str]) -> dict[str, Any]:
    """Run ``code`` after :data:`HEAP_ALONE` in a fresh interpreter; its last line, as JSON."""
    done = subprocess.run(
        [sys.executable, "-c", HEAP_ALONE + code, *args, heap.__file__],
        capture_output=True,
        text=True,
        env={"PATH": "", **env},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


CHILD = textwrap.dedent("""
    import json, resource, threading
    import numpy as np

    heap_buffers, raises_threshold = heap.heap_buffers, heap.raises_threshold

    def task():
        # an 8 MiB block, then buffers of 256 KiB made from it, all freed
        block = np.empty(8 << 20, np.uint8)
        block.fill(1)
        chunks = [block[i << 18 : (i + 1) << 18].copy() for i in range(8)]
        del chunks, block

    def faults(scoped):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(20):
            if scoped:
                with heap_buffers():
                    task()
            else:
                task()
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

    out = {"raises": raises_threshold()}
    out["main"] = [faults(False), faults(True)]
    thread = threading.Thread(target=lambda: out.update(thread=[faults(False), faults(True)]))
    thread.start()
    thread.join()
    print(json.dumps(out))
    """)


@pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's malloc"
)
def test_blocks_reuse_heap_memory_in_a_distributed_worker_environment() -> None:
    """With MALLOC_TRIM_THRESHOLD_ set (as distributed's nanny does), each 8 MiB
    buffer would be a fresh mapping whose pages all fault in; inside heap_buffers
    the heap serves them again and again."""
    out = _child(CHILD, env={"MALLOC_TRIM_THRESHOLD_": "65536"})
    assert out["raises"]
    if min(out["main"][0], out["thread"][0]) < 20 * 64:
        pytest.skip(f"huge pages: too few page faults to tell ({out})")
    for thread in ("main", "thread"):
        plain, scoped = out[thread]  # 4 KiB pages: up to 2048 faults per buffer
        assert scoped < plain / 5, out


KEPT = textwrap.dedent(
    """
    import json, sys
    import dask, numpy as np

    heap_buffers, raises_threshold = heap.heap_buffers, heap.raises_threshold

    def rss():
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024

    with dask.config.set({"shardpipe.memory.mmap-threshold": json.loads(sys.argv[1])}):
        with heap_buffers():  # the first of shardpipe's tasks in this process
            pass
    # one block of 16 MiB freed: left to adapt, glibc raises its threshold to 16 MiB
    np.ones(16 << 20, np.uint8)
    before = rss()
    # blocks of 16 MiB with small buffers between them that stay: freed, the blocks
    # leave holes in the heap that glibc cannot give back unless they were mapped alone
    kept, blocks = [], []
    for _ in range(8):
        blocks.append(np.ones(16 << 20, np.uint8))
        kept.append(np.ones(64 << 10, np.uint8))
    del blocks
    print(json.dumps({"raises": raises_threshold(), "left": rss() - before}))
    """
)


def _left(threshold: int | None) -> dict[str, Any]:
    return _child(KEPT, json.dumps(threshold), env={})  # glibc adapts: nothing chosen for it


@pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's malloc"
)
def test_freed_blocks_go_back_to_the_system_where_glibc_adapts() -> None:
    """Left to adapt, glibc keeps the 128 MiB of freed blocks in its heap; with the
    threshold fixed by shardpipe's first task, they were mapped alone and went back."""
    alone = _left(None)
    fixed = _left(SUGGESTED_MMAP_THRESHOLD)
    assert alone["raises"] and fixed["raises"]
    assert alone["left"] > 100 * MiB, alone
    assert fixed["left"] < 16 * MiB, fixed


ARENAS = textwrap.dedent(
    """
    import ctypes, json, os, re, tempfile, threading

    shared = heap.share_arenas() if sys.argv[1] == "share" else None
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.fopen.restype = ctypes.c_void_p
    libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
    libc.fclose.argtypes = [ctypes.c_void_p]
    ready, stop = threading.Barrier(5), threading.Event()

    def hold():
        libc.malloc(64 << 10)  # a thread's first allocation picks its heap
        ready.wait()
        stop.wait()

    threads = [threading.Thread(target=hold) for _ in range(4)]
    for thread in threads:
        thread.start()
    ready.wait()
    path = os.path.join(tempfile.mkdtemp(), "heaps.xml")
    out = libc.fopen(path.encode(), b"w")
    libc.malloc_info(0, out)
    libc.fclose(out)
    stop.set()
    print(json.dumps({"shared": shared, "heaps": len(re.findall('<heap nr=', open(path).read()))}))
    """
)


@pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's malloc"
)
def test_threads_started_after_share_arenas_share_two_heaps() -> None:
    """Four threads allocating at once: a heap each (and the main one), or two for all."""
    alone = _child(ARENAS, "alone", env={})
    shared = _child(ARENAS, "share", env={})
    chosen = _child(
        ARENAS, "share", env={"MALLOC_ARENA_MAX": "3"}
    )  # the environment's choice stays
    assert alone == {"shared": None, "heaps": 5}
    assert shared == {"shared": True, "heaps": SHARED_ARENAS}
    assert chosen == {"shared": False, "heaps": 3}


def test_share_arenas_leaves_a_chosen_number_alone() -> None:
    assert share_arenas({"MALLOC_ARENA_MAX": "4"}) is False
    assert share_arenas({"GLIBC_TUNABLES": "glibc.malloc.arena_max=4"}) is False


def test_the_console_script_shares_heaps_before_the_command_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from shardpipe.cli import parser

    calls: list[str] = []
    monkeypatch.setattr(parser, "share_arenas", lambda: calls.append("share") or True)
    monkeypatch.setattr(parser, "main", lambda: calls.append("main") or 0)
    assert parser.run() == 0
    assert calls == ["share", "main"]
