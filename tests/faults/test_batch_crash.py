"""kill -9 during a batch of region writes, then repair and run the batch again.

A batch changes each shard it touches once, behind the same undo record or
conditional put as any update: after a kill and ``repair`` every shard is
wholly as before the batch or wholly as after it (the batch is not one
transaction over its shards), and running the same batch again completes it.
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import numpy as np
import pytest

import shardpipe
from tests.support import batch_crash_child, crash_child
from tests.support.fork_server import ForkServer, kill_when_ready
from tests.support.readers import read_tensorstore, read_zarr

KILLS = 4


def _shard_boxes() -> list[tuple[slice, ...]]:
    shape, shards = crash_child.SHAPE, crash_child.SHARDS
    ranges = [range(0, n, s) for n, s in zip(shape, shards, strict=True)]
    return [
        tuple(slice(a, a + s) for a, s in zip(corner, shards, strict=True))
        for corner in itertools.product(*ranges)
    ]


def _states(start: np.ndarray) -> list[np.ndarray]:
    """The array after 0, 1, ... batches of the child's sequence (later pairs win)."""
    out = [start]
    for k in range(batch_crash_child.BATCHES):
        nxt = out[-1].copy()
        for region, values in batch_crash_child.batch(k):
            nxt[region] = values
        out.append(nxt)
    return out


@pytest.mark.parametrize("strategy", ["in_place", "rewrite"])
def test_kill_during_a_batch_then_repair_and_rerun(
    tmp_path: Path, strategy: str, fork_server: ForkServer
) -> None:
    path = tmp_path / "a.zarr"
    start = crash_child.write_initial(path)
    rand = random.Random(11)
    kills_mid_batch, rolled_back = 0, 0
    for attempt in range(KILLS):
        states = _states(start)
        progress = tmp_path / f"progress-{attempt}"
        kill_when_ready(
            fork_server,
            "tests.support.batch_crash_child",
            [str(path), strategy, str(progress)],
            progress,
            rand.uniform(0.1, 1.5),
        )
        done = progress.read_text().split().count("done")
        report = shardpipe.repair(str(path))
        assert report.ok, str(report)
        rolled_back += report.rolled_back
        got = read_zarr(str(path))
        np.testing.assert_array_equal(read_tensorstore(str(path)), got)
        if done == batch_crash_child.BATCHES:
            np.testing.assert_array_equal(got, states[-1])
            start = got
            continue
        before, after = states[done], states[done + 1]
        mixed = False
        for box in _shard_boxes():
            old, new = (got[box] == before[box]).all(), (got[box] == after[box]).all()
            assert old or new, f"kill {attempt}: shard at {box} is neither old nor new"
            mixed = mixed or not new
        kills_mid_batch += mixed and not (got == before).all()
        # the batch again, over what the kill left: the array is as after it
        shardpipe.write_regions(batch_crash_child.batch(done), str(path), write_strategy=strategy)
        np.testing.assert_array_equal(read_zarr(str(path)), after)
        assert shardpipe.verify(str(path)).ok
        start = after
    print(
        f"{strategy}: {KILLS} kills, {kills_mid_batch} left a batch half applied, "
        f"{rolled_back} shard(s) rolled back"
    )
