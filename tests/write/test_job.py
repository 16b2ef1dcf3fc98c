"""The write job: plan first (nothing written), then execute or hand over as a Delayed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np
import pytest
import zarr

import shardpipe
from shardpipe.storage.local.store import LocalShardStore
from tests.support.readers import assert_same, read_tensorstore, read_zarr


def _data() -> np.ndarray:
    values = np.arange(60 * 50, dtype="int32").reshape(60, 50)
    values[:20] = 0  # the first row of shards holds only the fill value
    return values


def _job(path: Path, **kwargs: Any) -> shardpipe.ShardedWrite:
    # blocks computed by tasks: misaligned views of a NumPy array would be read in shards
    source = da.from_array(_data(), chunks=(13, 17)).map_blocks(np.copy, dtype="int32")
    return shardpipe.prepare_write(source, str(path), shards=(20, 25), chunks=(10, 5), **kwargs)


def test_prepare_writes_nothing_and_shows_the_plan(tmp_path: Path) -> None:
    job = _job(tmp_path / "a.zarr", max_mem="1MB")
    assert not (tmp_path / "a.zarr").exists()
    plan = job.plan
    assert plan.n_shards == 6 and plan.n_multipart_shards == 0
    assert plan.nbytes_in == _data().nbytes
    assert plan.max_projected_mem <= 1_000_000
    assert plan.task_counts["write-shard"] == 6
    assert plan.task_counts["encode-piece"] == plan.num_tasks - 6  # misaligned blocks
    text = repr(job)
    for words in ("shards (20, 25), inner chunks (10, 5)", "6 (0 in parts", "tasks", "max_mem"):
        assert words in text, text
    html = job._repr_html_()
    assert html.startswith("<div>") and "<table>" in html and "inner chunks" in html


def test_the_plan_counts_one_block_and_one_part_in_the_singular(tmp_path: Path) -> None:
    job = shardpipe.prepare_write(np.zeros((8, 8), "u1"), str(tmp_path / "a.zarr"), chunks=(4, 4))
    text = repr(job)
    assert "in 1 Dask block (largest" in text and "; 1 part of up to" in text, text


def test_execute_reports_what_it_wrote(tmp_path: Path) -> None:
    report = _job(tmp_path / "a.zarr").execute()
    assert isinstance(report, shardpipe.WriteReport)
    assert (report.shards, report.shards_empty, report.shards_written) == (6, 2, 4)
    assert report.chunks_stored == 4 * 10 and report.seconds > 0
    files = [p for p in (tmp_path / "a.zarr" / "c").rglob("*") if p.is_file()]
    assert report.nbytes == sum(p.stat().st_size for p in files)
    assert "4 shard(s) written, 2 left out as empty" in str(report)
    assert_same(read_zarr(str(tmp_path / "a.zarr")), _data())


def test_delayed_write_writes_metadata_only_when_computed(tmp_path: Path) -> None:
    delayed = _job(tmp_path / "a.zarr").to_delayed()
    assert not (tmp_path / "a.zarr").exists()  # not even zarr.json
    names = {str(k[0] if isinstance(k, tuple) else k).rsplit("-", 1)[0] for k in delayed.dask}
    assert {"create-array", "encode-piece", "write-shard", "write-done"} <= names
    report = delayed.compute()
    assert report.shards == 6 and report.chunks_stored == 40
    assert_same(read_tensorstore(str(tmp_path / "a.zarr")), _data())


def test_target_that_appears_after_planning_is_not_overwritten(tmp_path: Path) -> None:
    job = _job(tmp_path / "a.zarr")
    zarr.create_array(str(tmp_path / "a.zarr"), shape=(3,), dtype="uint8").attrs["mine"] = 1
    with pytest.raises(shardpipe.ArrayExistsError):
        job.execute()
    assert zarr.open_array(str(tmp_path / "a.zarr")).attrs["mine"] == 1


@pytest.mark.parametrize("scheduler", ["threads", "sync", "processes"])
def test_every_local_scheduler_writes_and_shows_progress(
    tmp_path: Path, scheduler: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with dask.config.set(scheduler=scheduler):
        report = _job(tmp_path / "a.zarr", max_mem=12_000).execute(progress=True)
    assert report.shards == 6
    assert "6/6" in capsys.readouterr().err
    assert_same(read_zarr(str(tmp_path / "a.zarr")), _data())
    assert shardpipe.verify(str(tmp_path / "a.zarr")).ok


def test_processes_scheduler_gets_piece_tasks(tmp_path: Path) -> None:
    """On scheduler="processes" blocks travel: parts must not cut whole blocks in their task."""
    from shardpipe.engine.scheduler import runs_in_process

    source = da.ones((10,), chunks=5)
    with dask.config.set(scheduler="processes"):
        assert not runs_in_process(source)
    with dask.config.set(scheduler="threads"):
        assert runs_in_process(source)
    with dask.config.set(scheduler="sync"):
        assert runs_in_process(source)


def test_failed_cleanup_does_not_hide_the_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(block: np.ndarray, block_info: Any = None) -> np.ndarray:
        if block_info[None]["chunk-location"] == (2, 2):
            raise RuntimeError("the original failure")
        return block

    source = da.from_array(_data(), chunks=(13, 17)).map_blocks(fail, dtype="int32")

    sweep = LocalShardStore.cleanup

    def broken_cleanup(self: LocalShardStore, staging: str, shard_prefix: str) -> int:
        if shard_prefix.endswith("job.json"):  # the sweep beside the marker, as the job starts
            return sweep(self, staging, shard_prefix)
        raise PermissionError("cleanup failed as well")  # the cleanup after the failure

    monkeypatch.setattr(LocalShardStore, "cleanup", broken_cleanup)
    job = shardpipe.prepare_write(source, str(tmp_path / "a.zarr"), shards=(20, 25), chunks=(10, 5))
    with pytest.raises(RuntimeError, match="the original failure") as info:
        job.execute()
    notes = getattr(info.value, "__notes__", [])
    assert any("cleanup failed as well" in note for note in notes), notes


def test_to_sharded_zarr_is_the_job_executed(tmp_path: Path) -> None:
    out = shardpipe.to_sharded_zarr(
        da.from_array(_data(), chunks=(20, 25)), str(tmp_path / "a.zarr"), shards=(20, 25)
    )
    assert isinstance(out, zarr.Array)
    assert out.shards == (20, 25)
    assert_same(np.asarray(out[...]), _data())
