"""Resume never keeps a shard it did not write: the cases a review found, one test each."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np
import pytest

import shardpipe
from shardpipe.errors import InvalidArgumentError, StorageFullError
from shardpipe.write.prepare import prepare_write
from tests.faults.test_write_faults import _data, _faulty_target
from tests.support.readers import assert_same, read_zarr

LAYOUT = dict(shards=(16, 48, 40), chunks=(8, 16, 20))
REGION = (slice(3, 60), slice(0, 96), slice(5, 75))


@pytest.fixture(autouse=True)
def _threads() -> Iterator[None]:
    with dask.config.set(scheduler="threads"):
        yield


def _values(seed: int) -> da.Array:
    return da.from_array(_data(tuple(s.stop - s.start for s in REGION), seed=seed), (16, 48, 35))


def _interrupted_update(path: Path, source: da.Array) -> None:
    target, _ = _faulty_target(path, share=0.0, full_after=12)
    with pytest.raises(StorageFullError):
        prepare_write(source, target, region=REGION).execute()


def _records(path: Path) -> list[Path]:
    return [p for p in path.glob(".shardpipe/done/**/*") if p.is_file()]


def test_an_overwrite_forgets_the_old_arrays_update_records(tmp_path: Path) -> None:
    data = _data()
    shardpipe.to_sharded_zarr(data, str(tmp_path), **LAYOUT)
    _interrupted_update(tmp_path, _values(9))
    assert _records(tmp_path)
    shardpipe.to_sharded_zarr(data, str(tmp_path), overwrite=True, **LAYOUT)  # start again
    assert _records(tmp_path) == []
    job = prepare_write(_values(9), str(tmp_path), region=REGION, resume=True)
    assert job.skip == frozenset()
    job.execute()
    data[REGION] = _values(9).compute()
    assert_same(read_zarr(str(tmp_path)), data)


def test_an_update_forgets_other_updates_records(tmp_path: Path) -> None:
    data = _data()
    shardpipe.to_sharded_zarr(data, str(tmp_path), **LAYOUT)
    _interrupted_update(tmp_path, _values(9))  # update A
    _interrupted_update(tmp_path, _values(10))  # update B rewrites shards A had finished
    job = prepare_write(_values(9), str(tmp_path), region=REGION, resume=True)
    assert job.skip == frozenset()  # A's records went when B started
    job.execute()
    data[REGION] = _values(9).compute()
    assert_same(read_zarr(str(tmp_path)), data)
    assert shardpipe.verify(str(tmp_path), complete=True).ok


def test_a_region_write_retires_the_record_of_the_write_that_made_the_array(
    tmp_path: Path,
) -> None:
    data = _data()
    shardpipe.to_sharded_zarr(da.from_array(data, (16, 48, 40)), str(tmp_path), **LAYOUT)
    shardpipe.to_sharded_zarr(_values(9), str(tmp_path), region=REGION)
    with pytest.raises(InvalidArgumentError, match="no shardpipe job record"):
        prepare_write(da.from_array(data, (16, 48, 40)), str(tmp_path), resume=True, **LAYOUT)


def test_a_resumed_write_checks_its_record_again_when_it_runs(tmp_path: Path) -> None:
    a = da.from_array(_data(seed=1), chunks=(16, 48, 40))
    b = da.from_array(_data(seed=2), chunks=(16, 48, 40))
    target, _ = _faulty_target(tmp_path, share=0.0, full_after=6)
    with pytest.raises(StorageFullError):
        prepare_write(a, target, **LAYOUT).execute()
    job = prepare_write(a, str(tmp_path), resume=True, **LAYOUT)  # the record is a's
    shardpipe.to_sharded_zarr(b, str(tmp_path), overwrite=True, **LAYOUT)  # b replaces it
    with pytest.raises(InvalidArgumentError, match="written by another job: its source"):
        job.execute()
    with pytest.raises(InvalidArgumentError, match="written by another job: its source"):
        job.to_delayed().compute()
    assert np.array_equal(read_zarr(str(tmp_path)), b.compute())  # b's array untouched


def test_complete_shards_lists_the_shards_present(tmp_path: Path) -> None:
    """Resume looks at the shards listed, not at every position of a grid of a million."""
    from shardpipe.stored.metadata import layout_of, open_array_metadata
    from shardpipe.write.resume import complete_shards
    from tests.maintenance.test_verify import MILLION, counted, damage, sparse_array

    sparse_array(tmp_path, MILLION)
    damage(tmp_path / "c/1/2")
    (tmp_path / "c/0/07").write_bytes((tmp_path / "c/0/1").read_bytes())  # names no shard
    (tmp_path / "c/0/.1.abc.shardpipe-tmp").write_bytes(b"partial")
    target, store = counted(tmp_path)
    metadata = open_array_metadata(target)
    kept = complete_shards(target, metadata, layout_of(metadata))
    assert kept == {(i, j) for i in (0, 1) for j in range(4)} - {(1, 2)}
    assert store.requests < 100


def test_a_finished_update_leaves_no_record_folders(tmp_path: Path) -> None:
    """Records of finished shards stay while resume needs them, then go with their folders."""
    data = _data()
    shardpipe.to_sharded_zarr(data, str(tmp_path), **LAYOUT)
    for seed, strategy in [(9, "in_place"), (10, "append"), (11, "rewrite")]:
        shardpipe.to_sharded_zarr(
            _values(seed), str(tmp_path), region=REGION, write_strategy=strategy
        )
    _interrupted_update(tmp_path, _values(12))
    assert _records(tmp_path)  # what resume needs is kept until the update completes
    shardpipe.to_sharded_zarr(_values(12), str(tmp_path), region=REGION, resume=True)
    data[REGION] = _values(12).compute()
    assert_same(read_zarr(str(tmp_path)), data)
    left = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.glob(".shardpipe/**/*"))
    assert left == [], left


def _failing_write(path: Path, data: np.ndarray) -> None:
    def fail_on_the_last(block: np.ndarray, block_info: dict[Any, Any] | None = None) -> np.ndarray:
        if block_info is not None and block_info[0]["chunk-location"] == (3, 1, 1):
            raise OSError("injected")
        return block

    source = da.from_array(data, chunks=(16, 48, 40)).map_blocks(fail_on_the_last)
    with pytest.raises(OSError, match="injected"):
        shardpipe.to_sharded_zarr(source, str(path), **LAYOUT)


def test_a_rerun_without_resume_is_told_of_resume(tmp_path: Path) -> None:
    from shardpipe.errors import ArrayExistsError

    data = _data()
    _failing_write(tmp_path / "a.zarr", data)
    with pytest.raises(ArrayExistsError, match=r"did not finish.*resume=True.*overwrite=True"):
        shardpipe.to_sharded_zarr(data, str(tmp_path / "a.zarr"), **LAYOUT)
    shardpipe.to_sharded_zarr(data, str(tmp_path / "b.zarr"), **LAYOUT)
    with pytest.raises(ArrayExistsError, match="already exists") as refused:
        shardpipe.to_sharded_zarr(data, str(tmp_path / "b.zarr"), **LAYOUT)  # a finished one
    assert "resume=True" not in str(refused.value)
    with pytest.raises(ArrayExistsError, match=r"did not finish.*resume=True"):
        shardpipe.rechunk(str(tmp_path / "b.zarr"), str(tmp_path / "a.zarr"), **LAYOUT)


def _dead_pid() -> int:
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    return done.pid


@pytest.mark.parametrize("resume", [True, False])
def test_a_metadata_temporary_of_a_killed_write_is_no_foreign_node(
    tmp_path: Path, resume: bool
) -> None:
    """A write killed while its ``zarr.json`` was being written leaves shardpipe's temporary
    file of it in the array's folder: the writer is dead, so a write there, resumed or new,
    removes it instead of taking the folder for another tool's."""
    from shardpipe.storage.local.temporary import temporary_name

    path = tmp_path / "a.zarr"
    path.mkdir()
    mine = temporary_name("zarr.json")
    left = path / mine.replace(f"-{os.getpid()}@", f"-{_dead_pid()}@")
    left.write_bytes(b'{"zarr_format": 3, "node_ty')
    data = _data((32, 96, 80), seed=3)
    shardpipe.to_sharded_zarr(da.from_array(data, (16, 48, 40)), str(path), resume=resume, **LAYOUT)
    assert_same(read_zarr(str(path)), data)
    assert not left.exists()
    assert shardpipe.verify(str(path)).ok


def test_a_live_writers_temporary_is_still_refused_as_not_ours(tmp_path: Path) -> None:
    """The temporary file of a process still running is left alone, and the folder taken."""
    from shardpipe.errors import ArrayExistsError
    from shardpipe.storage.local.temporary import temporary_name

    path = tmp_path / "a.zarr"
    path.mkdir()
    running = path / temporary_name("zarr.json")  # this process's: its writer runs
    running.write_bytes(b"{")
    with pytest.raises(ArrayExistsError, match="shardpipe-tmp"):
        shardpipe.to_sharded_zarr(np.ones((8, 8), "uint8"), str(path), shards=(4, 4))
    assert running.exists()


def test_a_numpy_source_resumes_when_told_it_is_the_same_data(tmp_path: Path) -> None:
    """A NumPy array is not hashed, so resume=True cannot check it: it says so and what to
    pass (it said the array "was written by another job", whose source was the same
    object under a new random name); resume='force' completes the write."""
    data = _data()
    target, _ = _faulty_target(tmp_path / "a.zarr", share=0.0, full_after=6)
    with pytest.raises(StorageFullError):
        prepare_write(data, target, **LAYOUT).execute()
    with pytest.raises(InvalidArgumentError, match=r"NumPy array.*resume='force'.*from_array"):
        prepare_write(data, str(tmp_path / "a.zarr"), resume=True, **LAYOUT)
    report = prepare_write(data, str(tmp_path / "a.zarr"), resume="force", **LAYOUT).execute()
    assert report.shards_skipped > 0
    assert_same(read_zarr(str(tmp_path / "a.zarr")), data)
