"""Round trips: what to_sharded_zarr writes, zarr-python and tensorstore read back exactly."""

from __future__ import annotations

import math
import tempfile
from typing import Any

import dask.array as da
import numpy as np
import pytest
import zarr
from hypothesis import given
from hypothesis import strategies as st
from zarr.codecs import ZstdCodec

import shardpipe
from shardpipe.maintenance.verification import verify
from shardpipe.testing.strategies import WriteCase, write_cases
from tests.support.readers import assert_same, read_tensorstore, read_zarr


def check_round_trip(case: WriteCase, **kwargs: Any) -> None:
    with tempfile.TemporaryDirectory() as path:
        written = case.write(path, **kwargs)
        if kwargs.get("compute") is False:
            written.compute()
        assert_same(read_zarr(path), case.data)
        assert_same(read_tensorstore(path), case.data)
        report = verify(path)
        assert report.ok, str(report)


@given(case=write_cases())
def test_round_trip_zarr_and_tensorstore(case: WriteCase) -> None:
    check_round_trip(case)


@given(case=write_cases(), in_parts=st.booleans())
def test_round_trip_through_piece_tasks(case: WriteCase, in_parts: bool) -> None:
    """compute=False builds the graph for any scheduler: blocks encode pieces in their own tasks."""
    check_round_trip(case, compute=False, max_mem=_budget(case) if in_parts else "1GiB")


def _budget(case: WriteCase, floor: int = 2_000) -> int:
    """A max_mem that forces parts, yet fits the largest block and a few inner chunks.

    The memory model allows a direct part its block, the part encoded and
    one chunk's working copies, and a gathered part three times its size plus
    the working copies; codecs may add up to 1 KiB per chunk each.
    """
    itemsize = case.data.dtype.itemsize
    blocks = da.from_array(case.data, chunks=case.dask_chunks).chunks
    block_nbytes = math.prod(max(sizes) for sizes in blocks) * itemsize
    chunk_nbytes = math.prod(case.chunks) * itemsize
    return max(floor, block_nbytes + 8 * chunk_nbytes + 8192)


@given(case=write_cases(ndims=(1, 3)), max_mem=st.integers(2_000, 40_000))
def test_round_trip_in_parts(case: WriteCase, max_mem: int) -> None:
    """A tiny max_mem: shards are written in many parts, then stamped."""
    check_round_trip(case, max_mem=_budget(case, floor=max_mem))


@pytest.mark.parametrize("write_empty_chunks", [False, True])
def test_empty_chunks_are_left_out_unless_asked(tmp_path: Any, write_empty_chunks: bool) -> None:
    data = np.zeros((40, 40), dtype="int32")
    data[:10, :10] = 7
    shardpipe.to_sharded_zarr(
        da.from_array(data, chunks=(13, 17)),
        str(tmp_path),
        shards=(20, 20),
        chunks=(10, 10),
        write_empty_chunks=write_empty_chunks,
    )
    report = verify(str(tmp_path))
    stored = sum(s.chunks_stored for s in report.shards)
    present = sum(s.present for s in report.shards)
    assert (stored, present) == ((16, 4) if write_empty_chunks else (1, 1))
    assert_same(read_zarr(str(tmp_path)), data)


def test_zarrs_reads_what_was_written(tmp_path: Any) -> None:
    data = np.arange(30 * 41 * 7, dtype="uint16").reshape(30, 41, 7)
    shardpipe.to_sharded_zarr(
        da.from_array(data, chunks=(7, 9, 7)),
        str(tmp_path),
        shards=(16, 16, 8),
        chunks=(8, 4, 4),
        compressors=ZstdCodec(level=1),
        index_location="start",
    )
    assert_same(read_zarr(str(tmp_path), pipeline="zarrs.ZarrsCodecPipeline"), data)


def test_numpy_input_metadata_and_group(tmp_path: Any) -> None:
    group = zarr.open_group(str(tmp_path), mode="w")
    data = np.linspace(0, 1, 1000, dtype="float32").reshape(10, 100)
    out = shardpipe.to_sharded_zarr(
        data,
        group,
        path="volume",
        shards=(10, 50),
        chunks=(5, 25),
        dimension_names=["y", "x"],
        attributes={"units": "m"},
    )
    assert isinstance(out, zarr.Array)
    assert out.metadata.dimension_names == ("y", "x")
    assert out.attrs["units"] == "m"
    assert_same(np.asarray(zarr.open_group(str(tmp_path))["volume"][...]), data)
    assert_same(read_tensorstore(str(tmp_path / "volume")), data)


def test_compute_false_returns_a_delayed_write(tmp_path: Any) -> None:
    data = np.arange(100, dtype="int64")
    delayed = shardpipe.to_sharded_zarr(
        da.from_array(data, chunks=30), str(tmp_path), shards=(40,), chunks=(10,), compute=False
    )
    assert not (tmp_path / "c").exists()
    report = delayed.compute()
    assert report.shards == 3 and report.chunks_stored == 10
    assert_same(read_zarr(str(tmp_path)), data)


def test_defaults_pick_documented_shapes(tmp_path: Any) -> None:
    data = da.ones((64, 512, 512), dtype="uint16", chunks=(32, 256, 256))
    out = shardpipe.to_sharded_zarr(data, str(tmp_path))
    assert out.shards is not None
    inner = int(np.prod(out.chunks)) * 2
    assert 512 << 10 <= inner <= 1 << 20
    assert all(s % c == 0 for s, c in zip(out.shards, out.chunks, strict=True))
    assert_same(read_zarr(str(tmp_path)), np.ones((64, 512, 512), dtype="uint16"))
