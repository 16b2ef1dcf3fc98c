"""kill -9 during in-place and append updates, then repair: every inner chunk is old or new."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import numpy as np
import pytest

import shardpipe
from tests.support import crash_child
from tests.support.fork_server import ForkServer, kill_when_ready
from tests.support.readers import read_tensorstore, read_zarr

KILLS = 6


def _chunk_boxes() -> list[tuple[slice, ...]]:
    ranges = [range(0, n, c) for n, c in zip(crash_child.SHAPE, crash_child.CHUNKS, strict=True)]
    return [
        tuple(slice(a, a + c) for a, c in zip(corner, crash_child.CHUNKS, strict=True))
        for corner in itertools.product(*ranges)
    ]


def _done(progress: Path) -> int:
    lines = progress.read_text().split()
    return sum(1 for word in lines if word == "done")


@pytest.mark.parametrize(
    ("strategy", "source"), [("in_place", "dask"), ("append", "dask"), ("in_place", "numpy")]
)
def test_kill_during_updates_then_repair(
    tmp_path: Path, strategy: str, source: str, fork_server: ForkServer
) -> None:
    """``numpy``: the updates touching few shards run in the calling thread, with no graph."""
    path = tmp_path / "a.zarr"
    start = crash_child.write_initial(path)
    boxes = _chunk_boxes()
    rand = random.Random(7)
    rolled_back_total, kills_mid_update = 0, 0
    for attempt in range(KILLS):
        # each run applies the same sequence over whatever the last one left
        states = _model_from(start)
        progress = tmp_path / f"progress-{attempt}"
        # updates take tens of milliseconds: kill somewhere in the next few
        kill_when_ready(
            fork_server,
            "tests.support.crash_child",
            [str(path), strategy, str(progress), source],
            progress,
            rand.uniform(0.05, 1.5),
        )
        done = _done(progress)
        report = shardpipe.repair(str(path))
        assert report.ok, str(report)
        rolled_back_total += report.rolled_back
        kills_mid_update += report.rolled_back > 0
        got = read_zarr(str(path))
        np.testing.assert_array_equal(read_tensorstore(str(path)), got)
        before, after = states[done], states[min(done + 1, len(states) - 1)]
        for box in boxes:
            assert (got[box] == before[box]).all() or (got[box] == after[box]).all(), (
                f"kill {attempt}: inner chunk at {box} is neither old nor new"
            )
        start = got
    print(
        f"{strategy} ({source}): {KILLS} kills, {kills_mid_update} mid-update, "
        f"{rolled_back_total} shard(s) rolled back"
    )


def _model_from(start: np.ndarray) -> list[np.ndarray]:
    """The array after 0, 1, ... updates of the child's sequence, from ``start``."""
    out = [start]
    for k in range(crash_child.UPDATES):
        region, values = crash_child.update(k)
        nxt = out[-1].copy()
        nxt[region] = values
        out.append(nxt)
    return out
