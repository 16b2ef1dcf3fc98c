"""glibc's mmap threshold, fixed by the first write in a process, gives freed blocks back."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Any

import dask
import pytest

from shardpipe.engine.allocator import MMAP_THRESHOLD, mmap_threshold, settle_allocator

MiB = 2**20


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


def test_the_default_is_4_mib() -> None:
    assert mmap_threshold() == MMAP_THRESHOLD == 4 * MiB


@pytest.mark.parametrize("value", [True, "big", "64KiB", "33MiB", -1, 1.5, [4]])
def test_a_bad_threshold_is_refused_naming_the_setting_and_the_fix(value: Any) -> None:
    bad = {"shardpipe.memory.mmap-threshold": value}
    fix = r"shardpipe\.memory\.mmap-threshold.*'4MiB'.*None"
    with dask.config.set(bad), pytest.raises(ValueError, match=fix):
        settle_allocator()


CHILD = textwrap.dedent(
    """
    import json, sys
    import dask, numpy as np
    from shardpipe.engine.allocator import settle_allocator

    def rss():
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024

    with dask.config.set({"shardpipe.memory.mmap-threshold": json.loads(sys.argv[1])}):
        settled = settle_allocator()
    # one block of 8 MiB freed: left alone, glibc raises its threshold to 8 MiB
    np.ones(8 << 20, np.uint8)
    before = rss()
    # blocks of 8 MiB with small buffers between them that stay: freed, the blocks
    # leave holes in the heap that glibc cannot give back unless they were mapped alone
    kept, blocks = [], []
    for _ in range(16):
        blocks.append(np.ones(8 << 20, np.uint8))
        kept.append(np.ones(64 << 10, np.uint8))
    del blocks
    print(json.dumps({"settled": settled, "left": rss() - before}))
    """
)


def _left(threshold: int | None) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(threshold)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="glibc's allocator and /proc (Linux only)"
)
def test_freed_blocks_go_back_to_the_system_once_settled() -> None:
    alone = _left(None)
    settled = _left(4 * MiB)
    if settled["settled"] is None:
        pytest.skip("the C library is not glibc: nothing to settle")
    assert alone["settled"] is None and settled["settled"] == 4 * MiB
    # left alone, glibc keeps the 128 MiB of freed blocks; settled, it gives them back
    assert alone["left"] > 100 * MiB, alone
    assert settled["left"] < 16 * MiB, settled
