"""Two jobs on one array at once: one wins, the other fails clearly, nothing is mixed."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import dask
import numpy as np
import pytest

import shardpipe
from shardpipe.engine.update_tasks import StoredShard
from shardpipe.errors import ShardConflictError
from tests.support import race_child
from tests.support.fork_server import ForkServer
from tests.support.readers import read_zarr

ROUNDS = 5


def _race(server: ForkServer, path: Path, mode: str, go: Path) -> list[tuple[int, str]]:
    racers = [
        server.start("tests.support.race_child", [str(path), mode, str(v), str(go)]) for v in (1, 2)
    ]
    deadline = time.monotonic() + 120
    while not all(os.path.exists(race_child.ready_file(str(go), str(v))) for v in (1, 2)):
        # both have imported everything and wait for the start
        assert all(r.poll() is None for r in racers), "a racer ended before the start"
        assert time.monotonic() < deadline, "the racers did not get ready"
        time.sleep(0.01)
    go.touch()
    return [(r.wait(timeout=300), r.stderr()) for r in racers]


@pytest.mark.parametrize("mode", ["overwrite", "region"])
def test_two_jobs_on_one_array(tmp_path: Path, mode: str, fork_server: ForkServer) -> None:
    """Two processes (forked with shardpipe imported) write the same array at once."""
    outcomes = {"one failed": 0, "both ran": 0}
    for round_ in range(ROUNDS):
        path = tmp_path / f"a{round_}.zarr"
        shardpipe.to_sharded_zarr(
            np.zeros(race_child.SHAPE, "uint16"),
            str(path),
            shards=(16, 32, 32),
            chunks=(8, 16, 16),
            write_empty_chunks=True,
        )
        results = _race(fork_server, path, mode, tmp_path / f"go{round_}")
        codes = sorted(code for code, _ in results)
        assert codes in ([0, 0], [0, 3]), results
        if codes == [0, 3]:
            outcomes["one failed"] += 1
            loser = next(err for code, err in results if code == 3)
            assert "JobConflictError" in loser and "repair" in loser, loser
        else:
            outcomes["both ran"] += 1  # one after the other
        got = read_zarr(str(path))
        # nothing mixed: every element holds the same job's value
        assert len(np.unique(got)) == 1 and got.flat[0] in (1, 2), np.unique(got)
        assert shardpipe.verify(str(path)).ok
        assert not (path / ".shardpipe" / "job.json").exists()
    print(mode, outcomes)


def test_a_shard_changed_by_another_writer_is_never_overwritten(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Another writer (zarr-python) changes a shard between our read and our publish."""
    import zarr

    import shardpipe.engine.update_tasks as updating

    path = tmp_path / "a.zarr"
    data = np.arange(32 * 32, dtype="uint16").reshape(32, 32)
    shardpipe.to_sharded_zarr(data, str(path), shards=(16, 16), chunks=(4, 4))
    real = updating.read_shard

    def read_then_interfere(*args: Any, **kwargs: Any) -> StoredShard | None:
        stored = real(*args, **kwargs)
        zarr.open_array(str(path), mode="r+")[0:16, 0:16] = 7  # the other writer
        return stored

    monkeypatch.setattr(updating, "read_shard", read_then_interfere)
    # the patch lives in this process: run the tasks here
    monkeypatch.setitem(dask.config.config, "scheduler", "threads")
    for strategy in ("in_place", "append", "rewrite"):
        with pytest.raises(ShardConflictError) as info:
            shardpipe.to_sharded_zarr(
                np.ones((4, 4), "uint16"),
                str(path),
                region=(slice(0, 4), slice(0, 4)),
                write_strategy=strategy,
            )
        assert info.value.keys == ["c/0/0"], info.value.keys
        monkeypatch.setattr(updating, "read_shard", real)
        got = read_zarr(str(path))
        assert (got[0:16, 0:16] == 7).all()  # the other writer's shard stands
        assert (got[16:, :] == data[16:, :]).all()
        monkeypatch.setattr(updating, "read_shard", read_then_interfere)
    assert shardpipe.verify(str(path)).ok
