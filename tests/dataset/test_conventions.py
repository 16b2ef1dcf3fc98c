"""The dataset writer takes zarr's spellings too (issue 32, item 7).

``shards``/``chunks`` by tuple as well as by dict (and ``"auto"``), codec
names in ``encoding``; read back by xarray and zarr-python.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr

import shardpipe  # noqa: F401  (registers .shard)
from shardpipe.errors import InvalidArgumentError
from shardpipe.testing.datasets import climate_dataset


def _small() -> xr.Dataset:
    return climate_dataset(years=1, nlat=12, nlon=16, chunks={"time": 50, "lat": 12, "lon": 16})


def _layouts(store: Path) -> dict[str, tuple[tuple[int, ...], tuple[int, ...]]]:
    group = zarr.open_group(store, mode="r")
    return {
        name: (tuple(a.shards), tuple(a.chunks))
        for name, a in group.arrays()
        if a.shards is not None
    }


def test_shards_and_chunks_by_tuple_as_by_dict(tmp_path: Path) -> None:
    """A tuple follows ``ds.sizes``, as xarray reads a tuple of Dask chunks."""
    ds = _small()
    assert tuple(ds.sizes) == ("time", "lat", "lon")
    ds.shard.to_zarr(tmp_path / "dict", shards={"time": 73}, chunks={"time": 73, "lat": 6})
    ds.shard.to_zarr(tmp_path / "tuple", shards=(73, 12, 16), chunks=(73, 6, 16))
    by_dict, by_tuple = _layouts(tmp_path / "dict"), _layouts(tmp_path / "tuple")
    assert by_tuple == by_dict and by_tuple
    assert by_tuple["t2m"] == ((73, 12, 16), (73, 6, 16))
    assert by_tuple["land"] == ((12, 16), (6, 16))  # (lat, lon): their sizes
    xr.testing.assert_identical(xr.open_zarr(tmp_path / "tuple"), xr.open_zarr(tmp_path / "dict"))


def test_auto_is_shardpipes_default(tmp_path: Path) -> None:
    ds = _small()
    ds.shard.to_zarr(tmp_path / "none")
    ds.shard.to_zarr(tmp_path / "auto", shards="auto", chunks="auto")
    ds.shard.to_zarr(tmp_path / "enc", encoding={name: {"shards": "auto"} for name in ds.data_vars})
    assert _layouts(tmp_path / "auto") == _layouts(tmp_path / "none")
    assert _layouts(tmp_path / "enc") == _layouts(tmp_path / "none")  # "auto" is not None
    xr.testing.assert_identical(xr.open_zarr(tmp_path / "auto"), ds.compute())


def test_a_tuple_of_the_wrong_length_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="has 2 size") as caught:
        _small().shard.to_zarr(tmp_path / "x", chunks=(73, 12))
    assert caught.value.parameter == "chunks"
    assert "{'time': -1, 'lat': -1, 'lon': -1}" in str(caught.value)
    assert not (tmp_path / "x").exists()


def test_codec_names_in_encoding(tmp_path: Path) -> None:
    ds = _small()
    name = next(iter(ds.data_vars))
    ds.shard.to_zarr(tmp_path / "c", encoding={name: {"compressors": "gzip"}})
    array = zarr.open_group(tmp_path / "c", mode="r")[name]
    assert isinstance(array.compressors[0], zarr.codecs.GzipCodec)
    np.testing.assert_array_equal(array[:], ds[name].values)
    with pytest.raises(InvalidArgumentError, match="Did you mean 'gzip'"):
        ds.shard.to_zarr(tmp_path / "d", encoding={name: {"compressors": "gzp"}})
