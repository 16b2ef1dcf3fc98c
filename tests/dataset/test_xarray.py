"""The xarray accessor: ``ds.shard.to_zarr`` round trips, appends, regions, bad input."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr

import shardpipe
from shardpipe.errors import ArrayExistsError, InvalidArgumentError
from shardpipe.testing.datasets import climate_dataset
from shardpipe.write.arguments import check_max_mem
from shardpipe.write.options import check_array_options
from tests.support.readers import assert_same, read_tensorstore
from tests.support.spies import count_calls_by_module


@pytest.fixture(autouse=True)
def _threads() -> Any:
    # a session-scoped distributed client may be the default; these tests use threads
    with dask.config.set(scheduler="threads"):
        yield


def _many_dtypes(nt: int = 40) -> xr.Dataset:
    """Variables of several dims and dtypes, with the CF encodings the issue lists."""
    rng = np.random.default_rng(3)
    time = pd.date_range("2001-03-01", periods=nt, freq="6h")
    x64 = rng.standard_normal((nt, 12, 10))
    x64[0, 1, 2] = np.nan
    x32 = rng.standard_normal((nt, 12)).astype(np.float32)
    x32[5, :3] = np.nan
    counts = rng.integers(0, 100, (12, 10)).astype(np.float64)
    counts[3, 4] = np.nan
    # as xarray decodes int16 * 0.01: exact through packing
    packed = rng.integers(-2000, 2000, (nt, 10)).astype(np.int16).astype(np.float64) * 0.01
    ds = xr.Dataset(
        {
            "a64": (("time", "y", "x"), x64, {"units": "m", "long_name": "height"}),
            "b32": (("time", "y"), x32, {"note": "float32 with NaN"}),
            "counts": (("y", "x"), counts),
            "flag": (("time", "x"), rng.random((nt, 10)) > 0.5),
            "i8": (("x",), np.arange(10, dtype=np.int8)),
            "packed": (("time", "x"), packed),
            "when": (("time",), time + pd.Timedelta(minutes=30)),
            "lag": (("time",), pd.to_timedelta(np.arange(nt), unit="h").to_numpy()),
        },
        coords={
            "time": time,
            "y": np.linspace(0.5, 11.5, 12),
            "x": ("x", np.arange(10) * 100, {"units": "m"}),
            "dt": ("time", pd.to_timedelta(np.arange(nt), unit="min").to_numpy()),
        },
        attrs={"title": "many dtypes", "history": "made in a test"},
    )
    ds["counts"].encoding.update({"dtype": "int32", "_FillValue": np.int32(-9)})
    ds["packed"].encoding.update({"dtype": "int16", "scale_factor": 0.01, "_FillValue": -32768})
    return ds


CHUNKINGS = {
    "misaligned": {"time": 7, "y": 5, "x": 3},
    "irregular": {"time": (3, 17, 20), "y": (1, 11), "x": (10,)},
}


@pytest.mark.parametrize("chunking", sorted(CHUNKINGS))
def test_dataset_round_trip_is_identical(tmp_path: Path, chunking: str) -> None:
    ds = _many_dtypes()
    # data variables only: xarray itself refuses irregular Dask chunks for the coordinates
    source = ds.chunk(CHUNKINGS[chunking]).assign_coords(dt=ds.dt)
    store = tmp_path / "ds.zarr"
    reports = source.shard.to_zarr(
        store, shards={"time": 20, "y": 12}, chunks={"time": 10, "y": 4, "x": 5}
    )
    assert isinstance(reports, dict)
    assert set(reports) == set(ds.data_vars)
    xr.testing.assert_identical(xr.open_zarr(store), ds)
    xr.testing.assert_identical(xr.open_dataset(store, engine="zarr"), ds)
    group = zarr.open_group(store, mode="r")
    a64 = group["a64"]
    assert a64.shards == (20, 12, 10)
    assert a64.chunks == (10, 4, 5)
    assert a64.metadata.dimension_names == ("time", "y", "x")
    # independent reader of the stored (encoded) data
    assert_same(read_tensorstore(str(store / "counts")), np.asarray(group["counts"][...]))
    for name in reports:
        assert shardpipe.verify(store, path=name).ok


def test_the_report_gives_the_write_time_once_for_all_variables(tmp_path: Path) -> None:
    """Written together, the variables share the write's time: no per-variable rate."""
    ds = _many_dtypes().chunk({"time": 10})
    reports = ds.shard.to_zarr(tmp_path / "ds.zarr", shards={"time": 20})
    lines = str(reports).splitlines()
    assert len(lines) == len(ds.data_vars) + 1, lines
    assert not any(" s, " in line or "MB/s" in line for line in lines[:-1]), lines
    assert lines[-1].startswith(f"all {len(ds.data_vars)} variables: ") and " in " in lines[-1]
    one = ds[["a64"]].shard.to_zarr(tmp_path / "one.zarr", shards={"time": 20})
    assert str(one).startswith("a64: ") and " in " in str(one) and "\n" not in str(one)
    coordinates = ds[[]].shard.to_zarr(tmp_path / "none.zarr")  # no variable to shard
    assert str(coordinates) == "", str(coordinates)


@pytest.mark.filterwarnings("ignore:Consolidated metadata:UserWarning")
def test_writes_what_xarray_writes(tmp_path: Path) -> None:
    """Same metadata, attributes and decoded data as xarray's own sharded write."""
    ds = _many_dtypes()
    ours, theirs = tmp_path / "ours.zarr", tmp_path / "theirs.zarr"
    # data variables chunked, coordinates in memory, as in the xarray write below
    ds.chunk({"time": 7}).assign_coords(dt=ds.dt).shard.to_zarr(
        ours, shards={"time": 20}, chunks={"time": 10}
    )
    # shardpipe's inner chain ends with crc32c (chunk_checksums=True): xarray is given it
    checksummed = (zarr.codecs.ZstdCodec(), zarr.codecs.Crc32cCodec())
    layout = {
        name: {"shards": tuple(a.shards), "chunks": tuple(a.chunks), "compressors": checksummed}
        for name, a in zarr.open_group(ours, mode="r").arrays()
        if a.shards is not None
    }
    ds.chunk({"time": 20}).assign_coords(dt=ds.dt).to_zarr(
        theirs,
        zarr_format=3,
        encoding={name: {**ds[name].encoding, **layout[name]} for name in layout},
    )
    xr.testing.assert_identical(xr.open_zarr(ours), xr.open_zarr(theirs))
    ours_group, theirs_group = zarr.open_group(ours, mode="r"), zarr.open_group(theirs, mode="r")
    assert ours_group.attrs.asdict() == theirs_group.attrs.asdict()
    for name, array in theirs_group.arrays():
        expected = array.metadata.to_dict()
        assert ours_group[name].metadata.to_dict() == expected, name
    assert "consolidated_metadata" in (ours / "zarr.json").read_text()


def test_per_variable_encoding_and_defaults(tmp_path: Path) -> None:
    ds = _many_dtypes()
    store = tmp_path / "ds.zarr"
    ds.chunk({"time": 9}).shard.to_zarr(
        store,
        encoding={
            "a64": {"shards": (40, 6, 10), "chunks": (20, 3, 5)},
            "b32": {"compressors": None},
            "i8": {"shards": None},
        },
    )
    group = zarr.open_group(store, mode="r")
    assert group["a64"].shards == (40, 6, 10)
    assert group["a64"].chunks == (20, 3, 5)
    assert group["b32"].shards is not None  # shardpipe's default layout
    assert group["b32"].compressors == (zarr.codecs.Crc32cCodec(),)  # no compressor, a checksum
    assert group["i8"].shards is None  # left to xarray, unsharded
    assert group["time"].shards is None  # coordinates are written as xarray writes them
    xr.testing.assert_identical(xr.open_zarr(store), ds)


def test_numpy_backed_dataarrays_and_groups(tmp_path: Path) -> None:
    ds = _many_dtypes()
    store = tmp_path / "da.zarr"
    named = ds["a64"]
    named.shard.to_zarr(store, group="level1/named", shards={"time": 16})
    xr.testing.assert_identical(
        xr.open_dataarray(store, group="level1/named", engine="zarr"), named
    )
    unnamed = ds["b32"].rename(None)
    unnamed.shard.to_zarr(store, group="level1/unnamed")
    xr.testing.assert_identical(
        xr.open_dataarray(store, group="level1/unnamed", engine="zarr"), unnamed
    )
    assert zarr.open_group(store, mode="r")["level1/named/a64"].shards == (16, 12, 10)


def test_open_dataset_gives_one_dask_chunk_per_shard(tmp_path: Path) -> None:
    ds = climate_dataset(years=1, nlat=20, nlon=30)
    store = tmp_path / "c.zarr"
    ds.shard.to_zarr(store, shards={"time": 73}, chunks={"time": 73, "lat": 10, "lon": 15})
    plain = xr.open_zarr(store)
    assert plain["t2m"].data.chunksize == (73, 10, 15)  # xarray: one Dask chunk per inner chunk
    opened = shardpipe.open_dataset(store)
    assert opened["t2m"].data.chunksize == (73, 20, 30)
    assert opened["t2m"].data.npartitions == 5
    xr.testing.assert_identical(opened, ds)
    with pytest.raises(InvalidArgumentError, match="chunks"):
        shardpipe.open_dataset(store, chunks={})


def test_appends_grow_every_variable(tmp_path: Path) -> None:
    years = climate_dataset(years=3, nlat=12, nlon=20, chunks={"time": 50})
    store = tmp_path / "c.zarr"
    first = years.isel(time=slice(0, 365))
    first.shard.to_zarr(store, shards={"time": 100})
    for year in (1, 2):
        part = years.isel(time=slice(365 * year, 365 * (year + 1))).chunk({"time": 64})
        reports = part.shard.to_zarr(store, append_dim="time")
        assert isinstance(reports, dict)
        assert set(reports) >= {"t2m", "precip", "stations"}
    back = xr.open_zarr(store)
    # xarray decodes an appended datetime coordinate at ns resolution (its own appends do too)
    expected = years.assign_coords(analysis_time=years.analysis_time.astype("datetime64[ns]"))
    xr.testing.assert_identical(back, expected)
    for name in ("t2m", "precip", "stations"):
        assert shardpipe.verify(store, path=name).ok


@pytest.mark.parametrize("where", ["append_dim", "region"])
def test_the_variables_updated_share_options_checked_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """Three sharded variables updated: the options are checked by the door, not again for
    each variable's write."""
    years = climate_dataset(years=2, nlat=12, nlon=20)
    store = tmp_path / "c.zarr"
    years.isel(time=slice(0, 365)).shard.to_zarr(store, shards={"time": 100})
    calls = count_calls_by_module(monkeypatch, check_array_options)
    if where == "append_dim":
        reports = years.isel(time=slice(365, 400)).shard.to_zarr(
            store, append_dim="time", max_mem="64MB"
        )
    else:
        patch = years.isel(time=slice(100, 150)).drop_vars(["land", "lat", "lon"])
        reports = patch.shard.to_zarr(
            store, region="auto", max_mem="64MB", write_strategy="rewrite"
        )
    assert isinstance(reports, dict)
    assert {"t2m", "precip", "stations"} <= set(reports)
    assert calls == {"shardpipe.dataset.arguments": 1}, calls


def test_the_new_variables_filled_share_max_mem_checked_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four sharded variables created and filled: ``max_mem`` is checked by the door, not
    again for each variable's fill."""
    calls = count_calls_by_module(monkeypatch, check_max_mem)
    ds = climate_dataset(years=1, nlat=12, nlon=20)
    reports = ds.shard.to_zarr(tmp_path / "c.zarr", shards={"time": 100}, max_mem="64MB")
    assert isinstance(reports, dict)
    assert {"t2m", "precip", "stations"} <= set(reports)
    assert calls == {"shardpipe.write.options": 1}, calls
    xr.testing.assert_identical(xr.open_zarr(tmp_path / "c.zarr"), ds)


@pytest.mark.parametrize("strategy", ["auto", "rewrite", "in_place", "append"])
def test_region_writes_dict_and_auto(tmp_path: Path, strategy: str) -> None:
    ds = climate_dataset(years=1, nlat=12, nlon=20)
    store = tmp_path / "c.zarr"
    ds.shard.to_zarr(store, shards={"time": 50})
    expected = ds.compute()
    window = slice(120, 175)
    patch = (ds.isel(time=window).drop_vars("land") + 0).compute()
    for name in ("t2m", "precip", "stations"):
        patch[name] = (patch[name] * 0 + 7).astype(ds[name].dtype)
        patch[name].attrs = ds[name].attrs
        patch[name].encoding = ds[name].encoding
        expected[name][{"time": window}] = patch[name]
    # as xarray asks: variables without the region's dimension are left out
    patch.chunk({"time": 13}).drop_vars(["time", "analysis_time", "lat", "lon"]).shard.to_zarr(
        store, region={"time": window}, write_strategy=strategy
    )
    xr.testing.assert_identical(xr.open_zarr(store), expected)
    later = expected.isel(time=slice(300, 320)).drop_vars("land").copy(deep=True)
    for name in ("t2m", "precip", "stations"):
        later[name][:] = 3
        expected[name][{"time": slice(300, 320)}] = 3
    later.shard.to_zarr(store, region="auto", write_strategy=strategy)
    xr.testing.assert_identical(xr.open_zarr(store), expected)
    for name in ("t2m", "precip", "stations"):
        assert shardpipe.verify(store, path=name).ok


def test_compute_false_returns_delayed(tmp_path: Path) -> None:
    ds = _many_dtypes()
    store = tmp_path / "ds.zarr"
    delayed_write = ds.chunk({"time": 11}).shard.to_zarr(store, compute=False)
    assert zarr.open_group(store, mode="r")["a64"].nchunks_initialized == 0
    reports = dask.compute(delayed_write)[0]
    assert set(reports) == {str(n) for n in ds.data_vars if n != "i8"} | {"i8"}
    xr.testing.assert_identical(xr.open_zarr(store), ds)


@pytest.mark.cluster
def test_dataset_on_a_cluster_of_processes(tmp_path: Path, cluster_client: Any) -> None:
    ds = climate_dataset(years=1, nlat=12, nlon=20, chunks={"time": 40, "lat": 7, "lon": 11})
    store = tmp_path / "c.zarr"
    with dask.config.set(scheduler="dask.distributed"):
        ds.shard.to_zarr(store, shards={"time": 73})
        ds.isel(time=slice(0, 30)).assign_coords(
            time=ds.time[:30] + pd.Timedelta(days=365),
            analysis_time=ds.analysis_time[:30] + pd.Timedelta(days=365),
        ).shard.to_zarr(store, append_dim="time")
    back = xr.open_zarr(store)
    assert back.sizes["time"] == 395
    # read back and compare in this process: the cluster is the client's current scheduler
    # here, and shipping every small block of both datasets to it proves nothing on the write
    with dask.config.set(scheduler="threads"):
        xr.testing.assert_identical(back.isel(time=slice(0, 365)), ds)
        np.testing.assert_array_equal(back.t2m[365:].values, ds.t2m[:30].values)


# -- bad input: a clear error, nothing written -------------------------------------


def _files(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in path.rglob("*") if p.is_file()}


@pytest.fixture
def written(tmp_path: Path) -> Path:
    store = tmp_path / "c.zarr"
    climate_dataset(years=1, nlat=12, nlon=20).shard.to_zarr(store, shards={"time": 73})
    return store


def _bad_cases() -> dict[str, tuple[dict[str, Any], type[Exception], str]]:
    return {
        "unknown dim in shards": ({"shards": {"level": 3}}, InvalidArgumentError, "level"),
        "shards not multiple of chunks": (
            {"mode": "w", "shards": {"time": 73}, "chunks": {"time": 10}},
            InvalidArgumentError,
            r"variable '\w+' \(dims \('time', 'lat', 'lon'\)\): \(73, ",
        ),
        "mode w- on existing store": ({}, ArrayExistsError, "mode"),
        "unknown mode": ({"mode": "x"}, InvalidArgumentError, "mode"),
        "encoding of unknown variable": (
            {"mode": "w", "encoding": {"nope": {}}},
            InvalidArgumentError,
            "nope",
        ),
        "append along a missing dim": ({"append_dim": "level"}, InvalidArgumentError, "level"),
        "region and append_dim": (
            {"append_dim": "time", "region": {"time": slice(0, 5)}},
            InvalidArgumentError,
            "region",
        ),
        "max_mem": ({"mode": "w", "max_mem": "lots"}, InvalidArgumentError, "max_mem"),
    }


@pytest.mark.parametrize("case", sorted(_bad_cases()))
def test_bad_arguments_write_nothing(written: Path, case: str) -> None:
    kwargs, error, needle = _bad_cases()[case]
    before = _files(written)
    with pytest.raises(error, match=needle):
        climate_dataset(years=1, nlat=12, nlon=20).shard.to_zarr(written, **kwargs)
    assert _files(written) == before


def test_appending_another_dtype_writes_nothing(written: Path) -> None:
    more = climate_dataset(start="2001-01-01", years=1, nlat=12, nlon=20)
    more["t2m"] = more.t2m.astype(np.float64)
    before = _files(written)
    with pytest.raises(InvalidArgumentError, match=r"append_dim: variable 't2m' has dtype"):
        more.shard.to_zarr(written, append_dim="time")
    assert _files(written) == before


def test_region_beyond_the_stored_variable_writes_nothing(written: Path) -> None:
    part = climate_dataset(years=1, nlat=12, nlon=20).isel(time=slice(0, 10)).drop_vars("land")
    before = _files(written)
    with pytest.raises(InvalidArgumentError, match=r"region: variable '\w+': region time="):
        part.drop_vars(["time", "analysis_time", "lat", "lon"]).shard.to_zarr(
            written, region={"time": slice(360, 370)}
        )
    with pytest.raises(InvalidArgumentError, match=r"variable 't2m' has 12 along 'lon'"):
        wider = climate_dataset(years=1, nlat=12, nlon=12).isel(time=slice(0, 10))
        wider.drop_vars(["land", "time", "analysis_time", "lat", "lon"]).shard.to_zarr(
            written, region={"time": slice(0, 10)}
        )
    assert _files(written) == before


def test_a_new_dataset_needs_a_dataset(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="obj"):
        shardpipe.dataset.to_zarr(da.zeros(3), tmp_path / "x.zarr")  # type: ignore[arg-type]


# -- command line ------------------------------------------------------------------


def test_cli_writes_a_zarr_v2_dataset_sharded_and_repairs_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from shardpipe.cli.parser import main

    ds = _many_dtypes()
    v2 = tmp_path / "v2.zarr"
    ds.to_zarr(v2, zarr_format=2, consolidated=True)
    target = tmp_path / "v3.zarr"
    status = main(
        ["write-dataset", str(v2), str(target), "--shards", "time=20,y=12", "--chunks", "time=10"]
    )
    assert status == 0, capsys.readouterr().err
    assert "a64: 2 shard(s) written" in capsys.readouterr().out
    xr.testing.assert_identical(xr.open_zarr(target), ds)
    assert zarr.open_group(target, mode="r")["a64"].shards == (20, 12, 10)
    assert main(["write-dataset", str(v2), str(target)]) == 2
    assert "mode" in capsys.readouterr().err
    assert main(["repair-dataset", str(target)]) == 0
    assert "sharded array(s) repaired" in capsys.readouterr().out


def test_cli_rejects_malformed_dim_sizes() -> None:
    from shardpipe.cli.parser import main

    with pytest.raises(SystemExit):
        main(["write-dataset", "a", "b", "--shards", "time"])


def test_repair_dataset_needs_consolidated_metadata(tmp_path: Path) -> None:
    store = tmp_path / "c.zarr"
    _many_dtypes().shard.to_zarr(store, consolidated=False)
    with pytest.raises(InvalidArgumentError, match="consolidated"):
        shardpipe.dataset.repair_dataset(store)


@pytest.mark.parametrize(
    "kwargs",
    [{"mode": "w"}, {"append_dim": "time"}, {"region": "auto"}],
    ids=["overwrite", "append", "region"],
)
def test_a_running_job_on_a_variable_stops_the_dataset_write(
    written: Path, kwargs: dict[str, Any]
) -> None:
    from shardpipe.errors import JobConflictError
    from shardpipe.journal.array_lock import acquire, release
    from shardpipe.journal.markers import JobKeys
    from shardpipe.storage.resolve import resolve_store

    target = resolve_store(written, "precip")
    keys = JobKeys(target.key(""))
    marker = acquire(target.shards, keys, "update")  # this process runs: the job is live
    try:
        ds = climate_dataset(years=1, nlat=12, nlon=20)
        if "region" in kwargs:
            ds = ds.isel(time=slice(0, 5))
        if "append_dim" in kwargs:
            ds = climate_dataset(start="2001-01-01", years=1, nlat=12, nlon=20)
        before = _files(written)
        with pytest.raises(JobConflictError):
            ds.shard.to_zarr(written, **kwargs)
        assert _files(written) == before
    finally:
        release(target.shards, keys, marker)


def test_a_new_dataset_whose_plan_fails_leaves_nothing(tmp_path: Path) -> None:
    from shardpipe.errors import MemoryBudgetError

    store = tmp_path / "c.zarr"
    with pytest.raises(MemoryBudgetError, match="max_mem"):
        climate_dataset(years=1, nlat=12, nlon=20).shard.to_zarr(store, max_mem=1000)
    assert not store.exists() or _files(store) == {}


OPENERS = {
    "xarray, Dask chunks": lambda path: xr.open_zarr(path),
    "xarray, lazy": lambda path: xr.open_zarr(path, chunks=None),
    "shardpipe": lambda path: shardpipe.open_dataset(path),
}


@pytest.mark.parametrize("opened_with", OPENERS)
def test_a_dataset_rewritten_over_the_store_it_reads_is_refused(
    tmp_path: Path, opened_with: str
) -> None:
    values = np.arange(64 * 48, dtype="float32").reshape(64, 48)
    xr.Dataset({"t": (("z", "y"), values)}).shard.to_zarr(tmp_path / "a.zarr")
    before = _files(tmp_path / "a.zarr")
    opened = OPENERS[opened_with](tmp_path / "a.zarr")
    for target in (tmp_path / "a.zarr", tmp_path):
        with pytest.raises(shardpipe.SourceOverlapsTargetError, match=r"a\.zarr/t"):
            opened.shard.to_zarr(target, mode="w")
    assert _files(tmp_path / "a.zarr") == before
    assert_same(xr.open_zarr(tmp_path / "a.zarr").t.values, values)


def test_a_region_with_variables_outside_it_is_refused_naming_them(tmp_path: Path) -> None:
    from shardpipe.errors import InvalidArgumentError

    ds = climate_dataset(years=1, nlat=12, nlon=20)
    store = tmp_path / "c.zarr"
    ds.shard.to_zarr(store, shards={"time": 50})
    before = xr.open_zarr(store).compute()
    fix = ds[["t2m"]].isel(time=slice(100, 130)) + 1
    with pytest.raises(InvalidArgumentError, match=r"region: the variables \['lat', 'lon'\]"):
        fix.shard.to_zarr(store, region={"time": slice(100, 130)})
    xr.testing.assert_identical(xr.open_zarr(store), before)  # nothing written
    fix.drop_vars(["lat", "lon"]).shard.to_zarr(store, region={"time": slice(100, 130)})
    np.testing.assert_array_equal(xr.open_zarr(store)["t2m"][100:130].values, fix["t2m"].values)


def test_region_writes_xarray_would_refuse_midway_are_refused_first(tmp_path: Path) -> None:
    """Coordinates the store does not hold (region="auto") and variables it does not hold
    are refused naming region, before anything is written: they escaped as xarray's
    KeyError, or as a ValueError with a note to repair a store nothing had touched."""
    ds = climate_dataset(years=1, nlat=6, nlon=8)
    store = tmp_path / "c.zarr"
    ds.shard.to_zarr(store, shards={"time": 100})
    before = sorted(p.relative_to(store) for p in store.rglob("*"))
    later = ds[["t2m"]].isel(time=slice(0, 30)).drop_vars(["lat", "lon"])
    later = later.assign_coords(time=later.time + np.timedelta64(1000, "D"))
    with pytest.raises(InvalidArgumentError, match=r"region: .*append_dim") as unknown:
        later.shard.to_zarr(store, region="auto")
    assert "repair" not in str(unknown.value)
    renamed = ds[["t2m"]].rename(t2m="t3m").isel(time=slice(0, 30)).drop_vars(["lat", "lon"])
    with pytest.raises(InvalidArgumentError, match=r"region: .*\['t3m'\].*drop_vars") as new:
        renamed.shard.to_zarr(store, region={"time": slice(0, 30)})
    assert "repair" not in str(new.value)
    assert sorted(p.relative_to(store) for p in store.rglob("*")) == before


def test_a_failed_region_write_of_a_dataset_advises_only_what_a_dataset_write_has(
    tmp_path: Path,
) -> None:
    """The array update's note names ``resume=True``, which ``ds.shard.to_zarr`` does not
    take: the dataset's own recovery (repair the dataset, then write again) replaces it."""
    store = str(tmp_path / "d.zarr")
    ds = xr.Dataset({"v": (("x", "y"), np.zeros((40, 6), "i4"))})
    ds.shard.to_zarr(store, shards={"x": 10, "y": 6}, chunks={"x": 5, "y": 6})

    def block(block_info: Any = None) -> np.ndarray:
        (start, stop), _ = block_info[None]["array-location"]
        if start >= 20:
            raise OSError("the source went away")
        return np.ones((stop - start, 6), "i4")

    source = da.map_blocks(block, chunks=((10,) * 4, (6,)), dtype="i4", name="patch")
    patch = xr.Dataset({"v": (("x", "y"), source)})
    with dask.config.set(scheduler="synchronous"), pytest.raises(OSError) as raised:
        patch.shard.to_zarr(store, region={"x": slice(0, 40), "y": slice(0, 6)}, mode="r+")
    notes = "\n".join(getattr(raised.value, "__notes__", ()))
    assert "repair_dataset" in notes and "region write did not finish" not in notes, notes
