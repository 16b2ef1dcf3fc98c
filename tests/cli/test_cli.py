"""The command line: plan, verify, cleanup, info, compact, repair."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
    assert main([*argv, "--max-mem", "1KB"]) == 2
    assert "max_mem" in capsys.readouterr().err
    assert not (tmp_path / "dst").exists()


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
