"""Round trips: what to_sharded_zarr writes, zarr-python and tensorstore read back exactly."""

from __future__ import annotations

import itertools
import math
import tempfile
from dataclasses import dataclass
from typing import Any

import dask.array as da
import numpy as np
import pytest
import zarr
from hypothesis import given
from hypothesis import strategies as st
from zarr.codecs import BloscCodec, GzipCodec, TransposeCodec, ZstdCodec

import shardpipe
from shardpipe.verify import verify
from tests.readers import assert_same, read_tensorstore, read_zarr

DTYPES = [
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
]
COMPRESSORS: dict[str, Any] = {
    "none": None,
    "zstd": ZstdCodec(level=1),
    "gzip": GzipCodec(level=1),
    "blosc": BloscCodec(cname="lz4", clevel=3, shuffle="shuffle"),
}


@dataclass
class Case:
    """One write: the data, its Dask chunking and the array definition."""

    data: np.ndarray
    dask_chunks: Any
    shards: tuple[int, ...]
    chunks: tuple[int, ...]
    compressor: str
    transpose: bool
    index_location: str
    fill_value: Any

    def write(self, path: str, **kwargs: Any) -> Any:
        filters = (
            [TransposeCodec(order=tuple(reversed(range(self.data.ndim))))]
            if self.transpose
            else None
        )
        return shardpipe.to_sharded_zarr(
            da.from_array(self.data, chunks=self.dask_chunks),
            path,
            shards=self.shards,
            chunks=self.chunks,
            compressors=COMPRESSORS[self.compressor],
            filters=filters,
            index_location=self.index_location,
            fill_value=self.fill_value,
            **kwargs,
        )


def _partition(draw: st.DrawFn, n: int) -> tuple[int, ...]:
    """A random split of ``n`` into positive block sizes."""
    cuts = sorted(draw(st.sets(st.integers(1, n - 1), max_size=3))) if n > 1 else []
    edges = [0, *cuts, n]
    return tuple(b - a for a, b in itertools.pairwise(edges))


def _values(draw: st.DrawFn, dtype: np.dtype[Any], shape: tuple[int, ...]) -> np.ndarray:
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    values = rng.standard_normal(shape) * 1000
    if dtype.kind == "c":
        values = values + 1j * rng.standard_normal(shape)
    return values.astype(dtype)


@st.composite
def cases(draw: st.DrawFn, ndims: tuple[int, int] = (1, 5)) -> Case:
    ndim = draw(st.integers(*ndims))
    max_side = {1: 60, 2: 24, 3: 11, 4: 7, 5: 5}[ndim]
    shape = tuple(draw(st.lists(st.integers(1, max_side), min_size=ndim, max_size=ndim)))
    chunks = tuple(draw(st.integers(1, max(1, n // 2 + 1))) for n in shape)
    shards = tuple(c * draw(st.integers(1, 3)) for c in chunks)
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    data = _values(draw, dtype, shape)
    fill_value: Any = None
    fill_kind = draw(
        st.sampled_from(["default", "value", "nan"] if dtype.kind in "fc" else ["default", "value"])
    )
    if fill_kind == "nan":
        fill_value = np.nan
    elif fill_kind == "value":
        fill_value = data.flat[0].item()
    fill_for_data = np.nan if fill_kind == "nan" else (fill_value if fill_value is not None else 0)
    if draw(st.booleans()):  # a large empty region: a slab of fill value
        cut = draw(st.integers(0, shape[0]))
        data[:cut] = fill_for_data
    kind = draw(st.sampled_from(["aligned", "regular", "irregular", "one"]))
    dask_chunks: Any
    if kind == "aligned":
        dask_chunks = shards
    elif kind == "regular":
        dask_chunks = tuple(draw(st.integers(1, n)) for n in shape)
    elif kind == "irregular":
        dask_chunks = tuple(_partition(draw, n) for n in shape)
    else:
        dask_chunks = shape
    return Case(
        data=data,
        dask_chunks=dask_chunks,
        shards=shards,
        chunks=chunks,
        compressor=draw(st.sampled_from(sorted(COMPRESSORS))),
        transpose=draw(st.booleans()),
        index_location=draw(st.sampled_from(["end", "start"])),
        fill_value=fill_value,
    )


def check_round_trip(case: Case, **kwargs: Any) -> None:
    with tempfile.TemporaryDirectory() as path:
        written = case.write(path, **kwargs)
        if kwargs.get("compute") is False:
            written.compute()
        assert_same(read_zarr(path), case.data)
        assert_same(read_tensorstore(path), case.data)
        report = verify(path)
        assert report.ok, str(report)


@given(case=cases())
def test_round_trip_zarr_and_tensorstore(case: Case) -> None:
    check_round_trip(case)


@given(case=cases(), in_parts=st.booleans())
def test_round_trip_through_piece_tasks(case: Case, in_parts: bool) -> None:
    """compute=False builds the graph for any scheduler: blocks encode pieces in their own tasks."""
    check_round_trip(case, compute=False, max_mem=_budget(case) if in_parts else "1GiB")


def _budget(case: Case, floor: int = 2_000) -> int:
    """A max_mem that forces parts, yet fits the largest block and three inner chunks."""
    itemsize = case.data.dtype.itemsize
    blocks = da.from_array(case.data, chunks=case.dask_chunks).chunks
    block_nbytes = math.prod(max(sizes) for sizes in blocks) * itemsize
    return max(floor, block_nbytes, 3 * math.prod(case.chunks) * itemsize)


@given(case=cases(ndims=(1, 3)), max_mem=st.integers(2_000, 40_000))
def test_round_trip_in_parts(case: Case, max_mem: int) -> None:
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
