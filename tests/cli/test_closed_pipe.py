"""A reader that stops early (``shardpipe info DIR | head -1``) ends nothing in error."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import dask.array as da
import numpy as np

import shardpipe


def _write(path: Path) -> None:
    data = da.from_array(np.arange(4000, dtype="int32").reshape(40, 100), chunks=(15, 40))
    shardpipe.to_sharded_zarr(data, str(path), shards=(20, 50), chunks=(10, 25))


def _run_into_a_closed_pipe(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """Run ``shardpipe *argv`` with stdout a pipe whose reader has already gone."""
    read, write = os.pipe()
    os.close(read)  # the reader left before the first line: every write meets EPIPE
    try:
        return subprocess.run(
            [sys.executable, "-m", "shardpipe", *argv],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
    finally:
        os.close(write)


def test_info_into_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    _write(tmp_path)
    done = _run_into_a_closed_pipe(["info", str(tmp_path)])
    assert "Broken pipe" not in done.stderr and "Errno" not in done.stderr, done.stderr
    assert done.stderr == ""
    assert done.returncode == 0


def test_verify_into_a_closed_pipe_keeps_its_status(tmp_path: Path) -> None:
    """The reader leaving changes no verdict: damage is still status 1."""
    _write(tmp_path)
    shard = tmp_path / "c" / "1" / "1"
    damaged = bytearray(shard.read_bytes())
    damaged[-2] ^= 0x01
    shard.write_bytes(bytes(damaged))
    done = _run_into_a_closed_pipe(["verify", str(tmp_path)])
    assert done.stderr == "", done.stderr
    assert done.returncode == 1


def test_help_into_a_closed_pipe_ends_quietly() -> None:
    done = _run_into_a_closed_pipe(["rechunk", "--help"])
    assert done.stderr == "", done.stderr
    assert done.returncode == 0
