"""The progress bar counts shards and bytes, on the local scheduler and on a cluster."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np
import pytest

import shardpipe


def _write(path: Path, max_mem: Any = "64MB") -> None:
    data = da.from_array(np.arange(40 * 60, dtype="float64").reshape(40, 60), chunks=(7, 60))
    shardpipe.to_sharded_zarr(
        data, str(path), shards=(20, 30), chunks=(10, 10), max_mem=max_mem, progress=True
    )


def _final_count(stderr: str) -> str:
    counts = re.findall(r"(\d+)/4 \[", stderr)
    assert counts, stderr
    return counts[-1]


@pytest.mark.parametrize("max_mem", ["64MB", 10_000])  # whole shards; shards in parts
def test_progress_local_scheduler(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], max_mem: Any
) -> None:
    with dask.config.set(scheduler="threads"):
        _write(tmp_path, max_mem)
    stderr = capsys.readouterr().err
    assert _final_count(stderr) == "4"
    assert "MB written" in stderr


def test_progress_on_cluster(
    cluster_client: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _write(tmp_path)
    assert _final_count(capsys.readouterr().err) == "4"


def test_no_progress_by_default(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = da.ones((10, 10), chunks=5)
    shardpipe.to_sharded_zarr(data, str(tmp_path), shards=(10, 10), chunks=(5, 5))
    assert "shardpipe" not in capsys.readouterr().err
