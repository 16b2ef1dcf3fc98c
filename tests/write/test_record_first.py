"""A new array's job record comes just before its ``zarr.json``: no array without its record."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np
import pytest
import zarr
from zarr.storage import MemoryStore

import shardpipe
from shardpipe.errors import InvalidArgumentError
from shardpipe.internals.zarr_core import Buffer
from shardpipe.journal.job_record import read_record, save_record
from shardpipe.write.prepare import prepare_write
from shardpipe.write.resume import create_array

DATA = np.arange(24 * 20, dtype="uint16").reshape(24, 20)
SOURCE = da.from_array(DATA, chunks=(8, 20))  # the same Dask name in both runs


def test_a_rerun_of_create_array_whose_first_run_died_before_the_metadata(tmp_path: Path) -> None:
    """The first run saved the record (with its run token) and died: the rerun writes the
    metadata instead of taking the array for made."""
    job = prepare_write(SOURCE, str(tmp_path), path="a", shards=(8, 20), chunks=(4, 10))
    assert job.identity is not None and job.create_kwargs is not None
    save_record(job.target, job.identity, "running", "run-1")  # the first run, then a kill
    assert not (tmp_path / "a" / "zarr.json").exists()
    create_array(
        job.target,
        job.create_kwargs,
        False,
        job.write_target("token"),
        metadata=job.metadata,
        identity=job.identity,
        run="run-1",
    )
    assert (tmp_path / "a" / "zarr.json").exists()
    record = read_record(job.target)
    assert record is not None and record["run"] == "run-1" and record["state"] == "running"
    resumed = prepare_write(SOURCE, str(tmp_path), path="a", shards=(8, 20), chunks=(4, 10),
                            resume=True)  # fmt: skip
    resumed.execute()  # and the write is carried on over it
    assert np.array_equal(zarr.open_array(str(tmp_path / "a"), mode="r")[...], DATA)


class _RecordingStore(MemoryStore):
    """A memory store that notes the keys written, in order."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.written: list[str] = []

    async def set(self, key: str, value: Buffer) -> None:
        self.written.append(key)
        await super().set(key, value)

    async def set_if_not_exists(self, key: str, value: Buffer) -> None:
        if key not in self._store_dict:
            self.written.append(key)
        await super().set_if_not_exists(key, value)


def test_the_groups_above_then_the_record_then_the_zarr_json() -> None:
    """Whatever stops a write, an array whose zarr.json is there has its record and the
    groups above it (zarr writes those beside the array's zarr.json, in no set order)."""
    store = _RecordingStore()
    shardpipe.to_sharded_zarr(SOURCE, store, path="g/h/a", shards=(8, 20), chunks=(4, 10))
    order = [k for k in store.written if k.endswith(("zarr.json", "write.json"))]
    assert order[:5] == [
        "zarr.json",
        "g/zarr.json",
        "g/h/zarr.json",
        "g/h/a/.shardpipe/write.json",
        "g/h/a/zarr.json",
    ], order


def test_a_path_inside_an_array_is_refused_leaving_nothing_there(tmp_path: Path) -> None:
    shardpipe.to_sharded_zarr(DATA, str(tmp_path), path="a", shards=(8, 20), chunks=(4, 10))
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    with pytest.raises(InvalidArgumentError, match=r"^path: 'a/b' lies inside the array at 'a'"):
        shardpipe.to_sharded_zarr(DATA, str(tmp_path), path="a/b", shards=(8, 20), chunks=(4, 10))
    after = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert after == before
