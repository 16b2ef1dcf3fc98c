"""``shardpipe write-ome-zarr`` prints the plan before it writes and the report after, as the
other writers do."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr

from shardpipe.cli.parser import main


def test_the_plan_then_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "src.zarr"
    values = np.arange(8 * 40 * 40, dtype="uint16").reshape(8, 40, 40)
    zarr.create_array(str(source), data=values, chunks=(8, 20, 20))
    target = tmp_path / "out.ome.zarr"
    argv = ["write-ome-zarr", str(source), str(target), "--axes", "zyx", "--chunks", "8,16,16"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    plan, _, report = out.partition("peak memory per task")
    assert plan.startswith("OmeZarrWrite\n"), out
    assert "image: axes zyx, dtype uint16, 3 levels by mean" in plan
    assert "image 2: shape (8, 10, 10), factor (1, 4, 4)" in plan
    assert report.strip().splitlines()[-1].startswith("3 arrays, 3 shards, "), out
    assert main(["write-ome-zarr", str(source), str(target), "--append-dim", "z"]) == 0
    assert capsys.readouterr().out == f"appended to the OME-Zarr image {target}\n"
    assert zarr.open_array(str(target / "0"), mode="r").shape == (16, 40, 40)
