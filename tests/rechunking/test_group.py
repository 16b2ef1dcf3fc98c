"""shardpipe.rechunk_group: every member rechunked as a whole job, whatever its passes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dask
import numpy as np
import pytest
import zarr

import shardpipe
from shardpipe.cli.parser import main
from shardpipe.errors import ChunkDecodeError
from shardpipe.rechunking.group import plan_group_rechunk
from shardpipe.write.options import check_array_options
from tests.support.readers import assert_same, read_tensorstore
from tests.support.spies import count_calls_by_module

LAYOUT: dict[str, Any] = {"shards": (32, 64, 64), "chunks": (32, 32, 32), "max_mem": "1500KB"}
"""Under this budget ``slabs`` needs two passes (an intermediate copy), ``frames`` one."""


@pytest.fixture(autouse=True)
def _threads() -> Any:
    with dask.config.set(scheduler="threads"):
        yield


def _mixed_group(path: Path) -> dict[str, np.ndarray]:
    """A Zarr v2 group of one member read in thin slabs, one in blocks of whole inner chunks."""
    rng = np.random.default_rng(7)
    data = {
        "slabs": rng.integers(1, 4000, (32, 128, 256)).astype("uint16"),
        "frames": rng.integers(1, 4000, (32, 128, 256)).astype("uint16"),
    }
    root = zarr.open_group(path, mode="w", zarr_format=2)
    for name, chunks in (("slabs", (1, 128, 256)), ("frames", (32, 64, 128))):
        array = root.create_array(name, shape=(32, 128, 256), dtype="uint16", chunks=chunks)
        array[...] = data[name]
    return data


def test_the_members_need_one_pass_and_two(tmp_path: Path) -> None:
    _mixed_group(tmp_path / "src.zarr")
    job = plan_group_rechunk(tmp_path / "src.zarr", tmp_path / "out.zarr", **LAYOUT)
    passes = {path: len(member.passes()) for path, member in job.jobs.items()}
    assert passes == {"frames": 1, "slabs": 2}


def test_the_members_plan_with_the_options_checked_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two members planned (one of them trying several block shapes): the group's options
    are checked by its door, not again for each member nor at each try."""
    _mixed_group(tmp_path / "src.zarr")
    calls = count_calls_by_module(monkeypatch, check_array_options)
    job = plan_group_rechunk(
        tmp_path / "src.zarr", tmp_path / "out.zarr", chunk_checksums=False, **LAYOUT
    )
    assert set(job.jobs) == {"frames", "slabs"}
    assert calls == {"shardpipe.rechunking.group": 1}, calls
    for member in job.jobs.values():  # each member plans with the group's options
        assert member.write.plan.max_mem == 1_500_000
        (sharding,) = member.write.metadata.codecs
        assert "crc32c" not in str(sharding.to_dict()["configuration"]["codecs"])


def test_two_pass_and_one_pass_members_read_back_equal(tmp_path: Path) -> None:
    data = _mixed_group(tmp_path / "src.zarr")
    target = tmp_path / "out.zarr"
    report = shardpipe.rechunk_group(tmp_path / "src.zarr", target, **LAYOUT)
    assert set(report.rechunked) == {"slabs", "frames"}
    for name, values in data.items():
        assert_same(np.asarray(zarr.open_array(target / name, mode="r")[...]), values)
        assert_same(read_tensorstore(str(target / name)), values)
        assert report.rechunked[name].nbytes > 0
    assert report.rechunked["slabs"].intermediate_nbytes > 0  # both passes reported
    assert report.rechunked["frames"].intermediate_nbytes == 0
    assert "pass 1 of 2 (copy into the intermediate" in str(report.rechunked["slabs"])
    assert shardpipe.verify(target).ok
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.zarr", "src.zarr"]  # no copy left


def test_the_recursive_command_writes_two_pass_members(tmp_path: Path) -> None:
    data = _mixed_group(tmp_path / "src.zarr")
    target = tmp_path / "out.zarr"
    args = ["rechunk", str(tmp_path / "src.zarr"), str(target), "--recursive", "--no-progress"]
    shapes = ["--shards", "32,64,64", "--chunks", "32,32,32", "--max-mem", "1500KB"]
    assert main([*args, *shapes]) == 0
    assert_same(np.asarray(zarr.open_array(target / "slabs", mode="r")[...]), data["slabs"])


@pytest.mark.parametrize("where", ["itself", "its folder", "inside it"])
def test_a_group_rechunk_over_its_own_source_is_refused(tmp_path: Path, where: str) -> None:
    data = _mixed_group(tmp_path / "src.zarr")
    target = {"itself": "src.zarr", "its folder": ".", "inside it": "src.zarr/new"}[where]
    with pytest.raises(shardpipe.SourceOverlapsTargetError) as caught:
        shardpipe.rechunk_group(tmp_path / "src.zarr", tmp_path / target, overwrite=True, **LAYOUT)
    assert caught.value.parameter == "target"
    for name, values in data.items():
        assert_same(np.asarray(zarr.open_array(tmp_path / "src.zarr" / name)[...]), values)
    assert not (tmp_path / "src.zarr" / "new").exists()


def test_one_pass_two_pass_and_resumed_members_read_back_equal(tmp_path: Path) -> None:
    """A group rechunk that failed midway is resumed: the one-pass member keeps the shards
    it had written, the member that needed two passes is written, every member reads back
    equal."""
    source = tmp_path / "src.zarr"
    data = _mixed_group(source)
    target = tmp_path / "out.zarr"
    chunk = source / "frames" / "0.0.1"  # read after some of the member's shards were written
    good = chunk.read_bytes()
    chunk.write_bytes(b"not a compressed chunk")
    with dask.config.set(scheduler="sync"), pytest.raises(ChunkDecodeError):  # in order
        shardpipe.rechunk_group(source, target, **LAYOUT)
    chunk.write_bytes(good)
    written = sorted(p for p in (target / "frames" / "c").rglob("*") if p.is_file())
    assert 0 < len(written) < 8  # the failed run wrote some of its shards
    report = shardpipe.rechunk_group(source, target, resume=True, **LAYOUT)
    assert report.rechunked["frames"].shards_skipped == len(written)
    # a resumed rechunk runs one pass (it cannot resume a copy through an intermediate)
    assert report.rechunked["slabs"].shards_written == 8
    for name, values in data.items():
        assert_same(np.asarray(zarr.open_array(target / name, mode="r")[...]), values)
        assert_same(read_tensorstore(str(target / name)), values)
    assert shardpipe.verify(target).ok
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.zarr", "src.zarr"]  # no copy left
