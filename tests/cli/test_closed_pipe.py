"""A reader that stops early (``shardpipe info DIR | head -1``) ends nothing in error."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.volumes import write_small_array


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
    write_small_array(tmp_path)
    done = _run_into_a_closed_pipe(["info", str(tmp_path)])
    assert "Broken pipe" not in done.stderr and "Errno" not in done.stderr, done.stderr
    assert done.stderr == ""
    assert done.returncode == 0


def test_verify_into_a_closed_pipe_keeps_its_status(tmp_path: Path) -> None:
    """The reader leaving changes no verdict: damage is still status 1."""
    write_small_array(tmp_path)
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
