"""The command line: plan, verify, cleanup, info, compact, repair."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import shardpipe
from shardpipe.cli.parser import main
from shardpipe.core.display import format_nbytes
from tests.support.volumes import write_small_array


def test_verify_ok_and_damaged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_small_array(tmp_path)
    assert main(["verify", str(tmp_path)]) == 0
    assert "OK" in capsys.readouterr().out
    shard = tmp_path / "c" / "1" / "1"
    damaged = bytearray(shard.read_bytes())
    damaged[-2] ^= 0x01  # inside the index CRC32C
    shard.write_bytes(bytes(damaged))
    assert main(["verify", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "c/1/1" in out and "CRC32C mismatch" in out and "FAILED" in out


def test_verify_nothing_there(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", str(tmp_path / "missing")]) == 2
    assert "cannot check a sharded array" in capsys.readouterr().err


def test_console_script_runs(tmp_path: Path) -> None:
    write_small_array(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "shardpipe.cli.parser", "verify", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    staging = tmp_path / ".shardpipe/staging" / "old" / "x"
    staging.mkdir(parents=True)
    (staging / "part-00000").write_bytes(b"left over")
    done = subprocess.run(
        [sys.executable, "-m", "shardpipe.cli.parser", "cleanup", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0 and "removed 1" in done.stdout, done.stderr
    assert not (tmp_path / ".shardpipe/staging").exists()


def test_version_and_module_entry_point() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "shardpipe", "--version"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0 and done.stdout.startswith("shardpipe "), done.stderr


def test_plan_prints_the_summary_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "out.zarr"
    argv = ["plan", str(target), "--shape", "256,512,512", "--dtype", "uint16"]
    argv += ["--blocks", "100,100,100", "--shards", "128,256,256", "--chunks", "64,64,64"]
    assert main([*argv, "--max-mem", "64MB", "--compressor", "zstd:1"]) == 0
    out = capsys.readouterr().out
    assert "ShardedWrite" in out and "shards (128, 256, 256)" in out and "zstd" in out
    assert "8 (0 in parts" in out and "peak memory per task" in out
    assert not target.exists()


def test_plan_from_an_existing_array_and_bad_budget(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_small_array(tmp_path / "src")
    argv = ["plan", str(tmp_path / "dst"), "--source", str(tmp_path / "src"), "--chunks", "10,10"]
    assert main(argv) == 0
    assert "shape (40, 100)" in capsys.readouterr().out
    assert main([*argv, "--source-storage-option", "anon=true"]) == 2  # a local source
    assert "do not apply to the source" in capsys.readouterr().err
    made_up = ["plan", str(tmp_path / "dst"), "--shape", "8,8", "--chunks", "4,4"]
    assert main([*made_up, "--source-storage-option", "anon=true"]) == 2
    assert "--source-storage-option" in capsys.readouterr().err
    assert main([*argv, "--max-mem", "1KB"]) == 2
    err = capsys.readouterr().err  # the flag named as typed, not the Python parameter
    assert "more than --max-mem 1000" in err and "raise --max-mem" in err  # as it is typed
    assert "max_mem" not in err
    assert not (tmp_path / "dst").exists()


@pytest.mark.s3
def test_plan_of_a_local_array_into_s3_reaches_the_target_with_its_options(
    tmp_path: Path, s3_bucket: tuple[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """--storage-option is the target's, --source-storage-option the source's (the target
    of a plan with --source was opened without options: no usable credentials)."""
    bucket, options = s3_bucket
    write_small_array(tmp_path / "src")
    pairs = [f"{name}={json.dumps(value)}" for name, value in options.items()]
    argv = ["plan", f"s3://{bucket}/planned.zarr", "--source", str(tmp_path / "src")]
    assert main([*argv, "--chunks", "10,10", "--storage-option", *pairs]) == 0
    assert "shape (40, 100)" in capsys.readouterr().out


def test_info_compact_and_repair(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_small_array(tmp_path)
    for value in (1, 2):
        shardpipe.to_sharded_zarr(
            np.full((10, 25), value, "int32"),
            str(tmp_path),
            region=(slice(0, 10), slice(0, 25)),
            write_strategy="append",
        )
    assert main(["info", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "shape: (40, 100)" in out and "index at the end" in out
    assert "shards present: 4 of 4" in out and "unused" in out
    unused = shardpipe.info(str(tmp_path)).nbytes_unused
    assert unused > 0
    assert main(["compact", str(tmp_path), "--threshold", "0"]) == 0
    assert f"{format_nbytes(unused)} reclaimed" in capsys.readouterr().out
    assert main(["repair", str(tmp_path)]) == 0
    assert "rolled back: 0" in capsys.readouterr().out
    # a live job's marker: repair refuses (exit 2) unless --force
    (tmp_path / ".shardpipe").mkdir(exist_ok=True)
    marker = '{"job": "j1", "action": "update", "host": "elsewhere", "pid": 1, "started": 0}'
    (tmp_path / ".shardpipe" / "job.json").write_text(marker)
    assert main(["repair", str(tmp_path)]) == 2
    assert "j1" in capsys.readouterr().err
    assert main(["repair", str(tmp_path), "--force"]) == 0
    assert not (tmp_path / ".shardpipe" / "job.json").exists()
    assert main(["info", str(tmp_path / "nothing")]) == 2


def test_info_compact_and_repair_show_progress(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_small_array(tmp_path)
    shardpipe.to_sharded_zarr(
        np.full((10, 25), 1, "int32"),
        str(tmp_path),
        region=(slice(0, 10), slice(0, 25)),
        write_strategy="append",
    )
    for command in ("info", "compact", "repair"):
        assert main([command, str(tmp_path)]) == 0
        assert "4/4" not in capsys.readouterr().err  # no bar unless asked
        assert main([command, str(tmp_path), "--progress"]) == 0
        bar = capsys.readouterr().err
        assert "4/4" in bar and ("verify" if command == "repair" else command) in bar, bar
    assert shardpipe.compact(str(tmp_path), threshold=0, progress=True).shards_checked == 4
    assert "compact" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("pair", "named"),
    [
        ("client_kwargs=http://127.0.0.1:9000", "'client_kwargs' (given 'http://127.0.0.1:9000')"),
        ("config_kwargs=5", "'config_kwargs' (given 5)"),
        ("client_kwargs={bad json", "'client_kwargs' (given '{bad json')"),
        ('client_kwargs={"endpoint_url": 5}', "client_kwargs endpoint_url (given 5)"),
    ],
)
def test_a_storage_option_of_the_wrong_type_is_named(
    pair: str, named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """One line naming the option (they ended in a traceback from inside the client)."""
    for scheme in ("s3", "gs", "az"):
        assert main(["info", f"{scheme}://bucket/v.zarr", "--storage-option", pair]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--storage-option" in err and named in err, err


def test_a_scheduler_that_does_not_answer_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bad input naming --scheduler, before anything is written (it was reported as a
    write that failed part way, to be resumed)."""
    import dask

    write_small_array(tmp_path / "src")
    target = tmp_path / "dst.zarr"
    argv = ["rechunk", str(tmp_path / "src"), str(target), "--chunks", "10,10"]
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
        assert main([*argv, "--scheduler", "tcp://127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--scheduler" in err and "--resume" not in err, err
    assert not target.exists()


@pytest.mark.s3
@pytest.mark.parametrize("recursive", [[], ["--recursive"]], ids=["array", "group"])
def test_a_source_without_credentials_is_refused_access(
    tmp_path: Path,
    s3_bucket: tuple[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    recursive: list[str],
) -> None:
    """Exit status 3 (access refused), naming --source-storage-option; it was 2, as if the
    source were a bad argument (for a group's rechunk too)."""
    bucket, options = s3_bucket
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("AWS_SECURITY_TOKEN", raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    endpoint = json.dumps(options["client_kwargs"])
    argv = ["rechunk", f"s3://{bucket}/src.zarr", str(tmp_path / "dst.zarr")]
    argv += ["--chunks", "10,10", "--source-storage-option", f"client_kwargs={endpoint}"]
    assert main([*argv, *recursive]) == 3
    err = capsys.readouterr().err
    assert "no usable AWS credentials" in err and "--source-storage-option" in err, err
    assert not (tmp_path / "dst.zarr").exists()
