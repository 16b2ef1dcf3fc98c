"""One documented return type per function (issue 32, item 7).

The one-call writers of a Zarr array return the array; the other jobs return their
report; ``compute=False`` gives a ``Delayed`` that computes to the report (dask's and
xarray's convention). ``commit=`` on the array writers still returns the snapshot id, with
a ``FutureWarning`` (tested in ``tests/storage/test_icechunk.py``).
"""

from __future__ import annotations

import typing
from pathlib import Path

import numpy as np
import zarr
from dask.delayed import Delayed

import shardpipe

DATA = np.arange(32 * 32, dtype="uint16").reshape(32, 32)


def test_array_writers_return_the_array(tmp_path: Path) -> None:
    written = shardpipe.to_sharded_zarr(DATA, str(tmp_path / "a"), shards=(16, 16))
    assert isinstance(written, zarr.Array)
    rechunked = shardpipe.rechunk(str(tmp_path / "a"), str(tmp_path / "b"), shards=(32, 32))
    assert isinstance(rechunked, zarr.Array)
    np.testing.assert_array_equal(rechunked[:], DATA)
    delayed = shardpipe.to_sharded_zarr(DATA, str(tmp_path / "c"), compute=False)
    assert isinstance(delayed, Delayed)
    assert isinstance(delayed.compute(), shardpipe.WriteReport)


def test_other_jobs_return_their_report(tmp_path: Path) -> None:
    shardpipe.to_sharded_zarr(DATA, str(tmp_path / "a"), shards=(16, 16))
    written = shardpipe.to_neuroglancer_precomputed(
        DATA[..., None], tmp_path / "v", resolution=(1, 1, 1), chunk_size=(16, 16, 1)
    )
    assert isinstance(written, shardpipe.WriteReport)
    assert isinstance(shardpipe.verify(tmp_path / "a"), shardpipe.VerifyReport)
    assert isinstance(shardpipe.repair(tmp_path / "a"), shardpipe.RepairReport)
    assert isinstance(shardpipe.compact(tmp_path / "a"), shardpipe.CompactReport)
    assert isinstance(shardpipe.info(tmp_path / "a"), shardpipe.ArrayInfo)


def test_the_annotations_say_so() -> None:
    """The signatures name what the docstrings promise (``str``: the deprecated commit id)."""
    for function in (shardpipe.to_sharded_zarr, shardpipe.rechunk):
        returned = typing.get_type_hints(function)["return"]
        assert set(typing.get_args(returned)) == {zarr.Array[typing.Any], Delayed, str}
    hints = typing.get_type_hints(shardpipe.to_neuroglancer_precomputed)["return"]
    assert set(typing.get_args(hints)) == {shardpipe.WriteReport, Delayed}
