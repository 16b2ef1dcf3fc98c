"""verify and info on a group: a line per array and a total (API and command line)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr

import shardpipe
from shardpipe.cli.parser import main
from shardpipe.maintenance.array_info import GroupInfo


@pytest.fixture
def group(tmp_path: Path) -> Path:
    store = tmp_path / "g.zarr"
    root = zarr.open_group(store, mode="w", zarr_format=3)
    root.attrs["title"] = "nested"
    square = np.arange(4096, dtype="uint16").reshape(64, 64)
    shardpipe.to_sharded_zarr(square, root, path="a", shards=(32, 32), chunks=(16, 16))
    cube = np.ones((10, 10, 10), dtype="float32")
    shardpipe.to_sharded_zarr(cube, root, path="sub/b", shards=(5, 5, 5), chunks=(5, 5, 5))
    root.create_array("plain", shape=(4,), dtype="int8")
    return store


def test_verify_walks_a_group(group: Path) -> None:
    report = shardpipe.verify(group)
    assert report.ok
    assert set(report.arrays) == {"a", "sub/b"}
    assert report.skipped == {"plain": "not sharded"}
    assert len(report.shards) == 4 + 8
    text = str(report)
    assert "a: 4/4 shards" in text and "sub/b: 8/8 shards" in text
    assert "plain: skipped (not sharded)" in text and text.endswith("OK")


def test_a_bad_shard_in_a_group_fails_the_whole(group: Path) -> None:
    shard = group / "sub" / "b" / "c" / "0" / "0" / "0"
    shard.write_bytes(shard.read_bytes()[:-3])
    report = shardpipe.verify(group)
    assert not report.ok
    assert report.arrays["a"].ok and not report.arrays["sub/b"].ok
    assert "sub/b: 8/8 shards" in str(report) and "FAILED" in str(report)


def test_info_walks_a_group(group: Path) -> None:
    about = shardpipe.info(group)
    assert isinstance(about, GroupInfo)
    assert about.arrays["a"].shards == (32, 32)
    assert about.arrays["sub/b"].shards_present == 8
    assert "total: 2 sharded array(s), 12 shards" in str(about)


def test_commands_walk_a_group(group: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", str(group)]) == 0
    assert "total over 2 sharded array(s)" in capsys.readouterr().out
    assert main(["info", str(group)]) == 0
    assert "sub/b: shape (10, 10, 10)" in capsys.readouterr().out


def test_a_zarr_v2_group_has_nothing_to_verify(tmp_path: Path) -> None:
    store = tmp_path / "v2.zarr"
    zarr.open_group(store, mode="w", zarr_format=2).create_array("old", shape=(3,), dtype="i2")
    report = shardpipe.verify(store)
    assert report.skipped == {"old": "a Zarr v2 array"}
    assert report.shards == [] and report.ok
