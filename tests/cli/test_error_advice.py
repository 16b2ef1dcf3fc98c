"""Errors advise what fits their caller: flags on the command line, parameters in Python;
read commands never advise write options; no quoted placeholders; xarray objects are
pointed to ``ds.shard.to_zarr``; a folder that holds something else is not written into."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr
import zarr

import shardpipe
from shardpipe.cli.parser import main
from shardpipe.errors import ArrayExistsError, InvalidArgumentError

WRITE_ADVICE = re.compile(r"overwrite|region|append.dim|resume|write the array", re.IGNORECASE)


def _arrays(root: Path) -> dict[str, Path]:
    """A Zarr v2 array, an unsharded Zarr v3 array and a sharded one."""
    v2 = zarr.create_array(root / "v2", shape=(8, 8), chunks=(4, 4), dtype="u1", zarr_format=2)
    v2[:] = 1
    plain = zarr.create_array(root / "plain", shape=(8, 8), chunks=(4, 4), dtype="u1")
    plain[:] = 1
    shardpipe.to_sharded_zarr(np.ones((8, 8), "u1"), root / "sharded", shards=(4, 4), chunks=(2, 2))
    return {"v2": root / "v2", "plain": root / "plain", "sharded": root / "sharded"}


@pytest.mark.parametrize("command", ["info", "verify", "repair", "compact"])
@pytest.mark.parametrize("kind", ["v2", "plain"])
def test_read_and_maintenance_commands_never_advise_write_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, kind: str
) -> None:
    arrays = _arrays(tmp_path)
    assert main([command, str(arrays[kind])]) == 2
    err = capsys.readouterr().err
    assert not WRITE_ADVICE.search(err), err
    assert "rechunk" in err, err


@pytest.mark.parametrize("function", ["info", "repair", "compact"])
def test_the_api_read_functions_never_advise_write_options(tmp_path: Path, function: str) -> None:
    arrays = _arrays(tmp_path)
    with pytest.raises(InvalidArgumentError) as err:
        getattr(shardpipe, function)(str(arrays["v2"]))
    assert not WRITE_ADVICE.search(str(err.value)), err.value
    assert "shardpipe.rechunk" in str(err.value)


def test_the_cli_advises_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    arrays = _arrays(tmp_path)
    assert main(["rechunk", str(arrays["v2"]), str(arrays["sharded"])]) == 2
    err = capsys.readouterr().err
    assert "--overwrite" in err and "overwrite=True" not in err, err


PYTHON_NAMES = re.compile(r"\b(max_mem|temp_store|resume=|overwrite=)")


def test_the_rechunk_plan_on_the_command_line_names_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "slabs.zarr"
    zarr.create_array(source, shape=(64, 512, 512), chunks=(1, 512, 512), dtype="uint16")
    args = ["rechunk", str(source), str(tmp_path / "out.zarr"), "--shards", "64,256,256"]
    assert main([*args, "--chunks", "64,64,64", "--max-mem", "16MB", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "two passes" in out and "--max-mem" in out, out
    assert not PYTHON_NAMES.search(out), PYTHON_NAMES.search(out)
    # and in Python, the parameters
    shown = repr(
        shardpipe.plan_rechunk(
            source,
            tmp_path / "out.zarr",
            shards=(64, 256, 256),
            chunks=(64, 64, 64),
            max_mem="16MB",
        )
    )
    assert "max_mem" in shown and "--max-mem" not in shown


def test_the_api_advises_parameters(tmp_path: Path) -> None:
    arrays = _arrays(tmp_path)
    with pytest.raises(ArrayExistsError, match=re.escape("overwrite=True")) as err:
        shardpipe.rechunk(str(arrays["v2"]), str(arrays["sharded"]), shards=(4, 4))
    assert "--overwrite" not in str(err.value)


def test_no_quoted_placeholder_for_the_root(tmp_path: Path) -> None:
    arrays = _arrays(tmp_path)
    with pytest.raises(ArrayExistsError) as err:
        shardpipe.to_sharded_zarr(np.ones((8, 8), "u1"), arrays["sharded"], shards=(4, 4))
    assert "'the store root'" not in str(err.value)
    assert "the root of" in str(err.value)


@pytest.mark.parametrize("kind", ["Dataset", "DataArray"])
def test_xarray_objects_are_pointed_to_the_accessor(tmp_path: Path, kind: str) -> None:
    ds = xr.Dataset({"a": (("x",), np.arange(4))})
    obj = ds if kind == "Dataset" else ds["a"]
    with pytest.raises(InvalidArgumentError) as err:
        shardpipe.to_sharded_zarr(obj, tmp_path / "out.zarr", shards=(4,), chunks=(2,))
    text = str(err.value)
    assert f"got {kind}" in text and ".shard.to_zarr" in text, text
    if kind == "Dataset":
        assert "data_array" not in text, text
    assert not (tmp_path / "out.zarr").exists()


def test_a_folder_that_holds_no_zarr_is_not_written_into(tmp_path: Path) -> None:
    target = tmp_path / "notes"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    with pytest.raises(ArrayExistsError) as err:
        shardpipe.to_sharded_zarr(np.ones((8, 8), "u1"), target, shards=(4, 4), chunks=(2, 2))
    assert "overwrite=True" in str(err.value) and "notes.txt" in str(err.value)
    assert sorted(p.name for p in target.iterdir()) == ["notes.txt"]
    shardpipe.to_sharded_zarr(
        np.ones((8, 8), "u1"), target, shards=(4, 4), chunks=(2, 2), overwrite=True
    )
    np.testing.assert_array_equal(zarr.open_array(target)[:], 1)


def test_a_folder_with_a_zarr_v2_array_is_not_written_into(tmp_path: Path) -> None:
    arrays = _arrays(tmp_path)
    with pytest.raises(ArrayExistsError):
        shardpipe.to_sharded_zarr(np.ones((8, 8), "u1"), arrays["v2"], shards=(4, 4))
    assert not (arrays["v2"] / "zarr.json").exists()


def test_an_empty_folder_is_written_into(tmp_path: Path) -> None:
    target = tmp_path / "empty"
    target.mkdir()
    shardpipe.to_sharded_zarr(np.ones((8, 8), "u1"), target, shards=(4, 4), chunks=(2, 2))
    np.testing.assert_array_equal(zarr.open_array(target)[:], 1)


def test_the_cli_refuses_a_folder_that_holds_no_zarr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    arrays = _arrays(tmp_path)
    target = tmp_path / "notes"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    argv = ["rechunk", str(arrays["sharded"]), str(target), "--shards", "4,4", "--no-progress"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--overwrite" in err and "notes.txt" in err, err
    assert sorted(p.name for p in target.iterdir()) == ["notes.txt"]


def test_a_dataset_is_not_written_into_a_folder_that_holds_no_zarr(tmp_path: Path) -> None:
    target = tmp_path / "notes"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    ds = xr.Dataset({"a": (("x",), np.arange(4))})
    with pytest.raises(ArrayExistsError) as err:
        ds.shard.to_zarr(target)
    assert "mode='w'" in str(err.value) and "notes.txt" in str(err.value), err.value
    assert sorted(p.name for p in target.iterdir()) == ["notes.txt"]


@pytest.mark.s3
def test_an_s3_prefix_that_holds_no_zarr_is_not_written_into(
    s3_bucket: tuple[str, dict[str, Any]],
) -> None:
    import s3fs

    bucket, options = s3_bucket
    fs = s3fs.S3FileSystem(**options)
    fs.pipe(f"{bucket}/volume.zarr/report.csv", b"a,b\n")
    url = f"s3://{bucket}/volume.zarr"
    with pytest.raises(ArrayExistsError, match=r"report\.csv"):
        shardpipe.to_sharded_zarr(
            np.ones((8, 8), "u1"), url, shards=(4, 4), chunks=(2, 2), storage_options=options
        )
    assert fs.find(f"{bucket}/volume.zarr") == [f"{bucket}/volume.zarr/report.csv"]
    shardpipe.to_sharded_zarr(
        np.ones((8, 8), "u1"),
        url,
        shards=(4, 4),
        chunks=(2, 2),
        storage_options=options,
        overwrite=True,
    )
    np.testing.assert_array_equal(zarr.open_array(url, storage_options=options)[:], 1)


@pytest.mark.parametrize("kind", ["Dataset", "DataArray"])
def test_the_precomputed_writer_says_what_to_pass_of_an_xarray_object(
    tmp_path: Path, kind: str
) -> None:
    ds = xr.Dataset({"a": (("x", "y", "z"), np.zeros((8, 8, 8), "u1"))})
    obj = ds if kind == "Dataset" else ds["a"]
    with pytest.raises(InvalidArgumentError) as err:
        shardpipe.to_neuroglancer_precomputed(
            obj, tmp_path / "v", resolution=(1, 1, 1), chunk_size=(4, 4, 4)
        )
    assert ".data" in str(err.value) and ".shard.to_zarr" in str(err.value), err.value
    assert not (tmp_path / "v").exists()


def test_compact_names_its_flag_and_says_what_a_threshold_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    arrays = _arrays(tmp_path)
    assert main(["compact", str(arrays["sharded"]), "--threshold", "1.5"]) == 2
    err = capsys.readouterr().err
    assert "--threshold 0.1" in err and "threshold=" not in err, err
    with pytest.raises(InvalidArgumentError, match=r"'x' is not a number.*threshold=0\.1"):
        shardpipe.compact(str(arrays["sharded"]), threshold="x")  # type: ignore[arg-type]


def test_a_block_over_the_budget_is_advised_in_the_callers_terms(tmp_path: Path) -> None:
    """A Python caller chose the Dask blocks; a command's blocks are shardpipe's own."""
    import dask.array as da

    from shardpipe import advice
    from shardpipe.errors import MemoryBudgetError

    data = da.zeros((64, 64, 64), chunks=(64, 64, 64), dtype="u2")
    kwargs: dict[str, Any] = {"shards": (64, 64, 64), "chunks": (8, 8, 8), "max_mem": 100_000}
    with pytest.raises(MemoryBudgetError, match="rechunk the source into smaller blocks"):
        shardpipe.prepare_write(data, tmp_path / "a.zarr", **kwargs)
    with advice.command_line_terms(), pytest.raises(MemoryBudgetError) as raised:
        shardpipe.prepare_write(data, tmp_path / "a.zarr", **kwargs)
    assert "smaller blocks" not in str(raised.value) and "--max-mem" in str(raised.value)


def test_object_store_fixes_name_the_storage_option_flag() -> None:
    """What to set for credentials or an endpoint, in flags on the command line."""
    from shardpipe import advice
    from shardpipe.storage.azure.faults import _credentials_fix as azure_fix
    from shardpipe.storage.gcs.faults import credentials_fix as gcs_fix
    from shardpipe.storage.s3.faults import _credentials_fix as s3_fix

    for fix in (azure_fix, gcs_fix, s3_fix):
        assert "storage_options" in fix(), fix()
        with advice.command_line_terms():
            said = fix()
        assert "--storage-option " in said and "storage_options" not in said, said
