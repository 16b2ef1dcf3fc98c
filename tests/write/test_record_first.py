"""A new array's job record comes just before its ``zarr.json``: no array without its record."""

from __future__ import annotations

from pathlib import Path

import dask.array as da
import numpy as np
import zarr

from shardpipe.journal.job_record import read_record, save_record
from shardpipe.write.creation import create_array
from shardpipe.write.prepare import prepare_write

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
