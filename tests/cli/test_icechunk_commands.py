"""Whole jobs into Icechunk repositories: groups, datasets and the command line.

Everything is read back by zarr-python and xarray from Icechunk's own
sessions, never from shardpipe.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import icechunk  # in the test extra: a missing one must fail, not skip
import numpy as np
import pytest
import xarray as xr
import zarr

import shardpipe
from shardpipe.cli.parser import main
from shardpipe.errors import ChunkDecodeError
from tests.rechunking.test_rechunk import _v2_group
from tests.storage.test_icechunk import _data, _read, _repo
from tests.support.readers import assert_same

icechunk.set_logs_filter("error")  # its warnings about local storage go to stderr


def _open(path: Path) -> Any:
    return icechunk.Repository.open(icechunk.local_filesystem_storage(str(path)))


def _messages(repo: Any) -> list[str]:
    return [snapshot.message for snapshot in repo.ancestry(branch="main")]


# -- a group --------------------------------------------------------------------------------


def test_group_rechunk_is_one_commit(tmp_path: Path) -> None:
    data = _v2_group(tmp_path / "acq.zarr")
    repo = _repo(tmp_path)
    report = shardpipe.rechunk_group(
        tmp_path / "acq.zarr",
        repo.writable_session("main"),
        shards=(32, 64, 64),
        chunks=(16, 32, 32),
        max_mem="4MB",
        commit="the acquisition",
    )
    assert report.snapshot_id == repo.lookup_branch("main")
    assert f"committed as snapshot {report.snapshot_id}" in str(report)
    assert _messages(repo) == ["the acquisition", "Repository initialized"]
    out = zarr.open_group(repo.readonly_session("main").store, mode="r")
    assert out.attrs["title"] == "an acquisition"
    assert out["labels"].attrs["kind"] == "segmentation"
    assert out["raw"].shards == (32, 64, 64) and out["labels/tiny"].shards is None
    for name, values in data.items():
        assert_same(np.asarray(out[name][...]), values)
    for name in ("raw", "labels/cells"):
        assert shardpipe.verify(repo.readonly_session("main"), name).ok


def test_a_failed_group_rechunk_commits_nothing(tmp_path: Path) -> None:
    _v2_group(tmp_path / "acq.zarr")
    (tmp_path / "acq.zarr" / "labels" / "cells" / "40.0.0").write_bytes(b"not a chunk")
    repo = _repo(tmp_path)
    first = repo.lookup_branch("main")
    session = repo.writable_session("main")
    damaged = "labels/cells/40.0.0: 11 bytes, shorter than the 16-byte blosc header"
    with pytest.raises(ChunkDecodeError, match=damaged) as caught:  # named, not blosc's own
        shardpipe.rechunk_group(tmp_path / "acq.zarr", session, shards=(32, 64, 64), commit="never")
    # what the error says to do fits a transaction: nothing to resume, one note
    notes = caught.value.__notes__
    assert notes == [
        "shardpipe: the write did not finish; none of its shards reached the Icechunk session "
        "(the metadata it wrote did: session.discard_changes() drops it)"
    ]
    assert repo.lookup_branch("main") == first
    # the shards written stay out of the session; the small array copied in the client is in
    assert set(session.status().updated_chunks) == {"/labels/tiny"}
    session.discard_changes()
    assert not session.has_uncommitted_changes


# -- the command line -----------------------------------------------------------------------


def test_command_line_rechunk_verify_info(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = zarr.create_array(tmp_path / "src.zarr", shape=(40, 40), chunks=(10, 10), dtype="u2")
    data = _data((40, 40), seed=12)
    source[...] = data
    repo_path, src = str(tmp_path / "repo"), str(tmp_path / "src.zarr")
    rechunk = ["rechunk", src, repo_path, "--icechunk", "--path", "a", "--shards", "16,16"]
    assert main([*rechunk, "--chunks", "8,8", "--dry-run"]) == 0
    assert not (tmp_path / "repo").exists()  # a dry run creates no repository
    assert main([*rechunk, "--chunks", "3,3"]) == 2  # nor does a refused plan
    assert not (tmp_path / "repo").exists(), capsys.readouterr().err
    assert main([*rechunk, "--chunks", "8,8", "--no-progress", "--commit", "cli"]) == 0
    out = capsys.readouterr().out
    repo = _open(tmp_path / "repo")
    assert f"committed as snapshot {repo.lookup_branch('main')}" in out
    assert _messages(repo)[0] == "cli"
    assert_same(_read(repo, "a"), data)
    assert main(["verify", repo_path, "--icechunk", "--path", "a"]) == 0
    assert "problems: 0" in capsys.readouterr().out
    snapshot = repo.lookup_branch("main")
    assert main(["info", repo_path, "--icechunk", "--path", "a", "--snapshot", snapshot]) == 0
    assert "shards present: 9 of 9" in capsys.readouterr().out
    assert main(["verify", str(tmp_path / "none"), "--icechunk", "--path", "a"]) == 2
    assert "no Icechunk repository" in capsys.readouterr().err
    assert main(["rechunk", src, str(tmp_path / "plain.zarr"), "--commit", "x"]) == 2
    assert "--icechunk" in capsys.readouterr().err


def test_command_line_rechunks_a_group_into_a_repository(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _v2_group(tmp_path / "acq.zarr")
    repo_path = tmp_path / "repo"
    argv = ["rechunk", str(tmp_path / "acq.zarr"), str(repo_path), "--recursive", "--icechunk"]
    assert main([*argv, "--shards", "32,64,64", "--dry-run"]) == 0
    assert "labels/tiny: copied unsharded" in capsys.readouterr().out
    assert not repo_path.exists()
    assert main([*argv, "--shards", "32,64,64", "--no-progress"]) == 0
    out = capsys.readouterr().out
    repo = _open(repo_path)
    assert f"committed as snapshot {repo.lookup_branch('main')}" in out
    assert _messages(repo)[0] == f"shardpipe rechunk {tmp_path / 'acq.zarr'}"
    group = zarr.open_group(repo.readonly_session("main").store, mode="r")
    assert group["labels/cells"].shards == (32, 64, 64)
    for name, values in data.items():
        assert_same(np.asarray(group[name][...]), values)
    assert main(["verify", str(repo_path), "--icechunk"]) == 0
    assert "problems: 0" in capsys.readouterr().out


def test_command_line_writes_and_appends_a_dataset_into_a_repository(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    values = np.random.default_rng(3).random((40, 12)).astype("float32")
    ds = xr.Dataset(
        {"t": (("time", "x"), values), "station": ("x", [f"s{i}" for i in range(12)])},
        coords={"time": np.arange(40), "x": np.arange(12)},
        attrs={"title": "demo"},
    )
    # sources without consolidated metadata: xarray's warning about it is not the user's business
    for name, times in (("first", slice(0, 30)), ("more", slice(30, 40))):
        ds.isel(time=times).to_zarr(tmp_path / f"{name}.zarr", zarr_format=3, consolidated=False)
    repo_path = str(tmp_path / "repo")
    write = ["write-dataset", str(tmp_path / "first.zarr"), repo_path, "--icechunk"]
    assert main([*write, "--shards", "time=16", "--chunks", "time=8", "--commit", "one"]) == 0
    assert "committed as snapshot" in capsys.readouterr().out
    append = ["write-dataset", str(tmp_path / "more.zarr"), repo_path, "--icechunk"]
    assert main([*append, "--mode", "a", "--append-dim", "time"]) == 0, capsys.readouterr().err
    repo = _open(tmp_path / "repo")
    assert _messages(repo) == [
        f"shardpipe write-dataset {tmp_path / 'more.zarr'}",
        "one",
        "Repository initialized",
    ]
    back = xr.open_zarr(repo.readonly_session("main").store, consolidated=False)
    xr.testing.assert_identical(back.load(), ds)
    assert back["t"].encoding["shards"] == (16, 12)
    first = next(s.id for s in repo.ancestry(branch="main") if s.message == "one")
    old = xr.open_zarr(repo.readonly_session(snapshot_id=first).store, consolidated=False)
    assert old.sizes["time"] == 30


@pytest.mark.parametrize(
    "command, flags",
    [
        ("rechunk", ["--branch", "dev"]),
        ("rechunk", ["--commit", "msg"]),
        ("rechunk", ["--rebase"]),
        ("verify", ["--branch", "dev"]),
        ("verify", ["--snapshot", "abc"]),
        ("info", ["--snapshot", "abc"]),
    ],
)
def test_icechunk_flags_without_icechunk_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, flags: list[str]
) -> None:
    """Not ignored: a plain store has no branch or snapshot, and a write into it no commit."""
    source = zarr.create_array(tmp_path / "src.zarr", shape=(40, 40), chunks=(10, 10), dtype="u2")
    source[...] = 1
    if command == "rechunk":
        args = [
            "rechunk",
            str(tmp_path / "src.zarr"),
            str(tmp_path / "out.zarr"),
            "--shards",
            "20,20",
        ]
    else:
        args = [command, str(tmp_path / "src.zarr")]
    assert main([*args, *flags]) == 2
    err = capsys.readouterr().err
    assert flags[0] in err and "--icechunk" in err, err
    assert not (tmp_path / "out.zarr").exists()
