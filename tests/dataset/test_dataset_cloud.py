"""An xarray dataset on each cloud emulator: written, appended along time, a region updated,
read back."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

import shardpipe
from shardpipe.testing.datasets import climate_dataset

CLOUDS = [
    pytest.param("s3_bucket", "s3", marks=pytest.mark.s3, id="s3"),
    pytest.param("azure_container", "az", marks=pytest.mark.azure, id="azure"),
    pytest.param("gcs_bucket", "gs", marks=pytest.mark.gcs, id="gcs"),
]


@pytest.mark.parametrize(("fixture", "scheme"), CLOUDS)
def test_dataset_write_append_region(
    fixture: str, scheme: str, request: pytest.FixtureRequest
) -> None:
    bucket, options = request.getfixturevalue(fixture)
    url = f"{scheme}://{bucket}/climate.zarr"
    # two shards along time written, two appended (the size proves nothing: requests cost)
    full = climate_dataset(years=1, nlat=12, nlon=20, chunks={"time": 50, "lat": 5, "lon": 7})
    full = full.isel(time=slice(0, 4 * 73))
    full.isel(time=slice(0, 146)).shard.to_zarr(
        url, shards={"time": 73}, chunks={"time": 73, "lat": 6}, storage_options=options
    )
    full.isel(time=slice(146, 292)).shard.to_zarr(url, append_dim="time", storage_options=options)
    back = xr.open_zarr(url, storage_options=options)
    expected = full.assign_coords(analysis_time=full.analysis_time.astype("datetime64[ns]"))
    xr.testing.assert_identical(back, expected)
    patch = (full.isel(time=slice(10, 20)).drop_vars("land") * 0 + 1).compute()
    for name in ("t2m", "precip", "stations"):
        patch[name] = patch[name].astype(full[name].dtype)
        patch[name].attrs = full[name].attrs
    patch.shard.to_zarr(url, region="auto", storage_options=options)
    again = shardpipe.open_dataset(url, storage_options=options)
    np.testing.assert_array_equal(again.t2m[10:20].values, patch.t2m.values)
    np.testing.assert_array_equal(again.t2m[20:].values, full.t2m[20:].values)
    for name in ("t2m", "precip", "stations"):
        assert shardpipe.verify(url, path=name, storage_options=options).ok
