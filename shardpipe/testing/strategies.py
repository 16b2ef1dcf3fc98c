"""Hypothesis strategies for code that writes sharded arrays with shardpipe.

``write_cases()`` draws whole writes (data, Dask chunking, shards, inner
chunks, codecs, index location, fill value) that exercise aligned,
misaligned, irregular and single-block chunkings; ``block_chunks(n)`` draws
one dimension's Dask block sizes. Use them to test your own pipelines::

    from hypothesis import given
    from shardpipe.testing.strategies import write_cases

    @given(case=write_cases(ndims=(2, 3)))
    def test_my_pipeline(case, tmp_path_factory):
        path = tmp_path_factory.mktemp("w")
        case.write(path)
        ...

Needs the ``test`` extra (hypothesis).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import dask.array as da
import numpy as np
from hypothesis import strategies as st
from zarr.codecs import BloscCodec, GzipCodec, TransposeCodec, ZstdCodec

import shardpipe

__all__ = ["COMPRESSORS", "DTYPES", "WriteCase", "array_values", "block_chunks", "write_cases"]

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
class WriteCase:
    """One write: the data, its Dask chunking and the array definition."""

    data: np.ndarray
    dask_chunks: Any
    shards: tuple[int, ...]
    chunks: tuple[int, ...]
    compressor: str
    transpose: bool
    index_location: str
    fill_value: Any

    def write(self, path: Any, **kwargs: Any) -> Any:
        """Write the case with ``shardpipe.to_sharded_zarr`` (``kwargs`` passed on)."""
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


@st.composite
def block_chunks(draw: st.DrawFn, n: int, max_blocks: int = 4) -> tuple[int, ...]:
    """Dask block sizes along one dimension of length ``n``: a random split into positive parts."""
    cuts = sorted(draw(st.sets(st.integers(1, n - 1), max_size=max_blocks - 1))) if n > 1 else []
    edges = [0, *cuts, n]
    return tuple(b - a for a, b in itertools.pairwise(edges))


def array_values(draw: st.DrawFn, dtype: np.dtype[Any], shape: tuple[int, ...]) -> np.ndarray:
    """Random values of ``dtype`` over its whole range (a seed drawn from hypothesis)."""
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
def write_cases(draw: st.DrawFn, ndims: tuple[int, int] = (1, 5)) -> WriteCase:
    """A write of random data: dtype, shape, shards, chunks, Dask chunking, codecs, fill value.

    Dask chunkings are shard-aligned, regular, irregular or one block; about
    half the cases hold a slab of fill value (empty inner chunks).
    """
    ndim = draw(st.integers(*ndims))
    max_side = {1: 60, 2: 24, 3: 11, 4: 7, 5: 5}[ndim]
    shape = tuple(draw(st.lists(st.integers(1, max_side), min_size=ndim, max_size=ndim)))
    chunks = tuple(draw(st.integers(1, max(1, n // 2 + 1))) for n in shape)
    shards = tuple(c * draw(st.integers(1, 3)) for c in chunks)
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    data = array_values(draw, dtype, shape)
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
        dask_chunks = tuple(draw(block_chunks(n)) for n in shape)
    else:
        dask_chunks = shape
    return WriteCase(
        data=data,
        dask_chunks=dask_chunks,
        shards=shards,
        chunks=chunks,
        compressor=draw(st.sampled_from(sorted(COMPRESSORS))),
        transpose=draw(st.booleans()),
        index_location=draw(st.sampled_from(["end", "start"])),
        fill_value=fill_value,
    )
