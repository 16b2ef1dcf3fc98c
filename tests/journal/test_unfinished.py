"""One line per interrupted job, its hint worded for Python or for the command line."""

from __future__ import annotations

import pytest

from shardpipe.advice import command_line_terms
from shardpipe.journal.unfinished import UnfinishedJob, same_call, started_at, unfinished_lines


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
