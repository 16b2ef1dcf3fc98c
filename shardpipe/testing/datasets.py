"""A synthetic climate dataset, to try ``ds.shard.to_zarr`` and to test code that uses it.

Deterministic for a seed, lazy (Dask) and cheap to make at any size: a
daily time axis over whole years, latitude and longitude, temperature with
a seasonal cycle and NaNs over the sea, packed precipitation, a land mask,
an integer count with a fill value, and a datetime coordinate of the
analysis time.
"""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np
import pandas as pd  # type: ignore[import-untyped]
import xarray as xr


def climate_dataset(
    *,
    start: str = "2000-01-01",
    years: int = 3,
    nlat: int = 90,
    nlon: int = 180,
    chunks: dict[str, int] | None = None,
    seed: int = 0,
) -> xr.Dataset:
    """Make a daily (time, lat, lon) dataset with several variables, lazily.

    Parameters
    ----------
    start : str
        First day.
    years : int
        Number of years (365-day steps each, so that appended years line up).
    nlat, nlon : int
        Grid size.
    chunks : dict, optional
        Dask chunks per dimension (default ``{"time": 100, "lat": 50, "lon": 70}``,
        which lines up with no usual shard shape).
    seed : int
        Seed of the random parts; the same arguments give the same data.

    Returns
    -------
    xarray.Dataset
        Variables ``t2m`` (float32, K, NaN over the sea), ``precip`` (float64,
        mm/day, encoded as int16 with ``scale_factor``), ``stations`` (float32
        counts, NaN over the sea, encoded as int16 with ``_FillValue`` -1),
        ``land`` (bool, lat x lon); coordinates ``time``,
        ``lat``, ``lon`` and ``analysis_time`` (datetime64 along time).
    """
    chunks = {"time": 100, "lat": 50, "lon": 70, **(chunks or {})}
    time = pd.date_range(start, periods=365 * years, freq="D")
    lat = np.linspace(-89.0, 89.0, nlat)
    lon = np.linspace(0.0, 360.0, nlon, endpoint=False)
    land = _land_mask(lat, lon)
    shape = (len(time), nlat, nlon)
    block = (chunks["time"], chunks["lat"], chunks["lon"])
    day = da.arange(len(time), chunks=block[0])[:, None, None] + int(time[0].day_of_year)
    seasonal = 15.0 * da.cos(2 * np.pi * (day - 200) / 365.25)
    base = 288.0 - 40.0 * da.from_array(np.abs(np.sin(np.deg2rad(lat)))[None, :, None], (1, -1, 1))
    noise = da.random.default_rng(seed).standard_normal(shape, chunks=block, dtype=np.float32)
    sea = da.from_array(~land, chunks=(block[1], block[2]))
    t2m = (base + seasonal + 3.0 * noise).astype(np.float32)
    t2m = da.where(sea[None, :, :], np.float32(np.nan), t2m)
    rain = da.random.default_rng(seed + 1).gamma(0.6, 40.0, shape, chunks=block)
    # whole tenths of a mm, computed as xarray decodes int16 * 0.1: exact through packing
    precip = da.minimum(da.floor(rain), 30000).astype(np.int16).astype(np.float64) * 0.1
    counts = da.random.default_rng(seed + 2).integers(0, 5, shape, chunks=block, dtype=np.int16)
    # counts are whole numbers with gaps (NaN) over the sea, stored as int16 with a fill value
    stations = da.where(sea[None, :, :], np.float32(np.nan), counts.astype(np.float32))
    ds = xr.Dataset(
        {
            "t2m": (("time", "lat", "lon"), t2m, {"units": "K", "long_name": "2 m temperature"}),
            "precip": (("time", "lat", "lon"), precip, {"units": "mm/day"}),
            "stations": (("time", "lat", "lon"), stations, {"long_name": "reporting stations"}),
            "land": (("lat", "lon"), land, {"long_name": "land mask"}),
        },
        coords={
            "time": time,
            "lat": ("lat", lat, {"units": "degrees_north"}),
            "lon": ("lon", lon, {"units": "degrees_east"}),
            "analysis_time": ("time", time + pd.Timedelta(hours=6)),
        },
        attrs={"title": "synthetic daily climate", "source": "shardpipe.testing"},
    )
    ds["precip"].encoding.update(
        {"dtype": "int16", "scale_factor": 0.1, "_FillValue": np.int16(-32768)}
    )
    ds["stations"].encoding.update({"dtype": "int16", "_FillValue": np.int16(-1)})
    return ds


def climate_encoding() -> dict[str, dict[str, Any]]:
    """Per-variable encodings of :func:`climate_dataset`, for writers that take them apart."""
    return {
        "precip": {"dtype": "int16", "scale_factor": 0.1, "_FillValue": np.int16(-32768)},
        "stations": {"dtype": "int16", "_FillValue": np.int16(-1)},
    }


def _land_mask(lat: np.ndarray, lon: np.ndarray) -> np.ndarray:
    """Two blobby continents: deterministic, no data files."""
    la, lo = np.meshgrid(np.deg2rad(lat), np.deg2rad(lon), indexing="ij")
    field = np.sin(2 * lo) * np.cos(la) + 0.5 * np.cos(3 * la + lo)
    return np.asarray(field > 0.3)
