"""``shardpipe write-dataset`` takes what the other writers take: codec, cluster, region."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr
import zarr
from distributed import get_task_stream
from zarr.codecs import GzipCodec

from shardpipe.cli.parser import main


def _source(path: Path, start: int = 0, stop: int = 40, offset: float = 0.0) -> Path:
    time = np.arange(start, stop)
    values = np.arange(start * 12, stop * 12, dtype="float32").reshape(-1, 12) + offset
    ds = xr.Dataset({"a": (("time", "y"), values)}, coords={"time": time})
    ds.to_zarr(path, zarr_format=2, consolidated=True)
    return path


def test_compressor_is_the_codec_of_new_variables(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, target = _source(tmp_path / "in.zarr"), tmp_path / "out.zarr"
    argv = ["write-dataset", str(source), str(target), "--shards", "time=20"]
    assert main([*argv, "--compressor", "gzip:1"]) == 0, capsys.readouterr().err
    array = zarr.open_group(target, mode="r")["a"]
    assert isinstance(array, zarr.Array)
    assert GzipCodec(level=1) in array.compressors
    xr.testing.assert_identical(xr.open_zarr(target).compute(), xr.open_zarr(source).compute())


def test_scheduler_runs_the_write_on_that_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cluster_client: Any
) -> None:
    source, target = _source(tmp_path / "in.zarr"), tmp_path / "out.zarr"
    address = cluster_client.scheduler.address
    argv = ["write-dataset", str(source), str(target), "--shards", "time=20"]
    with get_task_stream(client=cluster_client) as stream:
        assert main([*argv, "--scheduler", address]) == 0, capsys.readouterr().err
    assert stream.data, "the cluster's workers ran the write"
    xr.testing.assert_identical(xr.open_zarr(target).compute(), xr.open_zarr(source).compute())


def test_scheduler_and_workers_exclude_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["write-dataset", "a", "b", "--scheduler", "tcp://x:1", "--workers", "2"])
    assert exit_.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_region_writes_part_of_existing_variables(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, target = _source(tmp_path / "in.zarr"), tmp_path / "out.zarr"
    assert main(["write-dataset", str(source), str(target), "--shards", "time=20"]) == 0
    patch = _source(tmp_path / "patch.zarr", 10, 20, offset=0.5)
    argv = ["write-dataset", str(patch), str(target), "--region", "time=10:20"]
    assert main(argv) == 0, capsys.readouterr().err
    back = xr.open_zarr(target)["a"].values
    expected = xr.open_zarr(source)["a"].values.copy()
    expected[10:20] += 0.5
    np.testing.assert_array_equal(back, expected)


def test_region_auto_finds_the_slice_from_the_coordinates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, target = _source(tmp_path / "in.zarr"), tmp_path / "out.zarr"
    assert main(["write-dataset", str(source), str(target), "--shards", "time=20"]) == 0
    patch = _source(tmp_path / "patch.zarr", 30, 35, offset=0.25)
    assert main(["write-dataset", str(patch), str(target), "--region", "auto"]) == 0, (
        capsys.readouterr().err
    )
    back = xr.open_zarr(target)["a"].values
    expected = xr.open_zarr(source)["a"].values.copy()
    expected[30:35] += 0.25
    np.testing.assert_array_equal(back, expected)


@pytest.mark.parametrize("bad", ["time", "time=3", "time=a:b", "=1:2"])
def test_a_malformed_region_is_refused(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["write-dataset", "a", "b", "--region", bad])
    assert exit_.value.code == 2
    assert "--region" in capsys.readouterr().err
