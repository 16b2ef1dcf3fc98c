"""``--scheduler``/``--workers``: refused by name before anything is written, in every command."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr

from shardpipe.cli.exit_statuses import BAD_INPUT
from shardpipe.cli.parser import main


def _argv(command: str, source: str, target: str) -> list[str]:
    if command == "write-precomputed":
        return [command, source, target, "--resolution", "1,1,1", "--chunk-size", "8,8,8"]
    return [command, source, target]


@pytest.mark.timeout(60)  # a LocalCluster of no worker waits for one forever
@pytest.mark.parametrize("workers", ["0", "-2"])
@pytest.mark.parametrize("command", ["rechunk", "write-precomputed"])
def test_workers_below_one_are_refused_before_writing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, workers: str
) -> None:
    source = zarr.create_array(
        tmp_path / "src.zarr", shape=(16, 16, 16), chunks=(8, 8, 8), dtype="u1"
    )
    source[:] = np.arange(16**3, dtype="u1").reshape(16, 16, 16)
    target = tmp_path / "out"
    status = main([*_argv(command, str(tmp_path / "src.zarr"), str(target)), "--workers", workers])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == BAD_INPUT, err
    assert len(err) == 1 and err[0].startswith(f"shardpipe {command}: ") and "--workers" in err[0]
    assert not target.exists()
