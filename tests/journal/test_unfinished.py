"""One line per interrupted job, its hint worded for Python or for the command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from shardpipe.advice import command_line_terms
from shardpipe.journal import unfinished
from shardpipe.journal.unfinished import (
    EVERY_RECORD,
    JobFolder,
    UnfinishedJob,
    job_folder,
    same_call,
    started_at,
    unfinished_lines,
)
from shardpipe.storage.keys import (
    DONE_DIR,
    JOB_DIR,
    JOB_MARKER,
    STAGING_DIR,
    UNDO_DIR,
    WRITE_RECORD,
)
from shardpipe.storage.resolve import resolve_store


def test_a_job_is_one_line_with_its_record_first() -> None:
    job = UnfinishedJob(
        "ome", ".shardpipe/ome-write.json", "the OME-Zarr image", 1700000000, "carry on", "append"
    )
    assert unfinished_lines([job]) == [
        "interrupted jobs: 1",
        "  .shardpipe/ome-write.json: an unfinished append of the OME-Zarr image "
        "(started 2023-11-14 22:13:20 UTC): carry on",
    ]
    assert unfinished_lines([]) == []


def test_the_kind_names_the_job_when_nothing_else_does() -> None:
    job = UnfinishedJob("rechunk-copy", "k", "the target", None, "carry on")
    assert job.describe() == "an unfinished rechunk (its intermediate copy) of the target: carry on"


def test_the_call_is_named_in_the_callers_terms() -> None:
    assert same_call("to_ome_zarr", "write-ome-zarr") == "the same shardpipe.to_ome_zarr call"
    with command_line_terms():
        assert same_call("to_ome_zarr", "write-ome-zarr") == (
            "the same `shardpipe write-ome-zarr` command"
        )


@pytest.mark.parametrize("value", [True, -1, 0, 2**35, 1e300, float("nan"), "1700000000", None])
def test_a_start_time_a_record_cannot_mean_is_left_out(value: object) -> None:
    assert started_at(value) is None


def test_a_plausible_start_time_is_kept() -> None:
    assert started_at(1700000000) == 1700000000.0


def _folder_with(tmp_path: Path, *keys: str) -> JobFolder:
    target = resolve_store(str(tmp_path / "a.zarr"), None, {"fsync": False})
    for key in keys:
        target.shards.put(target.key(key), [b"{}"])
    return job_folder(target)


def test_the_job_folder_is_listed_once_and_only_what_it_holds_is_read(tmp_path: Path) -> None:
    folder = _folder_with(tmp_path, WRITE_RECORD, f"{UNDO_DIR}/job/0123")
    assert folder.keys == {WRITE_RECORD, f"{UNDO_DIR}/job/0123"}
    assert folder.may_hold(WRITE_RECORD) and folder.may_hold(UNDO_DIR)
    assert not folder.may_hold(JOB_MARKER) and not folder.may_hold(STAGING_DIR)
    assert not folder.may_hold(f"{JOB_DIR}/un")  # a folder holds the keys under it, no more
    assert _folder_with(tmp_path / "empty").keys == frozenset()


def test_a_folder_too_long_to_list_may_hold_every_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(unfinished, "FOLDER_KEYS_LISTED", 2)
    folder = _folder_with(tmp_path, *(f"{DONE_DIR}/u/{i}" for i in range(3)))
    assert folder == EVERY_RECORD and folder.may_hold(JOB_MARKER)
