"""``info``, ``verify`` and ``repair`` (functions and commands) take an image group as a whole."""

from __future__ import annotations

import json
from pathlib import Path

import dask.array as da
import numpy as np
import pytest

import shardpipe
from shardpipe.cli import main

LEVELS = ["0", "1", "2"]


def _image(root: Path) -> None:
    data = np.random.default_rng(3).integers(0, 4000, (2, 16, 64, 48), dtype=np.uint16)
    shardpipe.to_ome_zarr(
        da.from_array(data, chunks=(1, 7, 30, 25)),
        root,
        "czyx",
        scale_factors=[{"y": 2, "x": 2}, {"z": 2, "y": 4, "x": 4}],
        shards=(1, 8, 32, 32),
        chunks=(1, 4, 16, 16),
        labels={"cells": (data[0] > 2000).astype(np.uint8)},
    )


def test_info_lists_every_level_of_the_image_and_its_labels(tmp_path: Path) -> None:
    root = tmp_path / "img.ome.zarr"
    _image(root)
    found = shardpipe.info(str(root))
    assert isinstance(found, shardpipe.GroupInfo)
    expected = LEVELS + [f"labels/cells/{level}" for level in LEVELS]
    assert sorted(found.arrays) == sorted(expected)
    assert not found.skipped
    for path, about in found.arrays.items():
        stored = sum(p.stat().st_size for p in (root / path / "c").rglob("*") if p.is_file())
        assert about.nbytes_stored == stored, path
        assert about.shards_present == about.n_shards, path


def test_the_commands_take_the_group(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The commands' own code, run in this process (``tests/cli`` runs the entry point)."""
    root = tmp_path / "img.ome.zarr"
    _image(root)
    for command in ("info", "verify", "repair"):
        status = main([command, str(root)])
        out, err = capsys.readouterr()
        assert status == 0, (command, err)
        assert "labels/cells/2" in out, (command, out)
    # a level's shape changed: no shard is wrong, the group's own check says which level is
    meta = root / "1" / "zarr.json"
    document = json.loads(meta.read_text())
    document["shape"][-1] += 8
    meta.write_text(json.dumps(document))
    checked = shardpipe.verify(str(root))
    assert not checked.ok
    assert any("level '1' has the shape" in p for _, p in checked.problems), checked.problems
