"""Both passes of a two-pass rechunk show: one progress bar across them, a report of each."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import dask
import numpy as np
import pytest
import zarr

import shardpipe
from shardpipe.cli.parser import main
from shardpipe.rechunking.job import COPY, WRITE
from tests.support.readers import assert_same, read_zarr

LAYOUT: dict[str, Any] = {"shards": (64, 128, 128), "chunks": (16, 32, 32), "max_mem": "1MB"}
"""Under this budget, slabs of (1, 128, 128) are read in blocks thinner than an inner chunk."""


@pytest.fixture(autouse=True)
def _threads() -> Any:
    with dask.config.set(scheduler="threads"):
        yield


def _slabs(path: Path) -> tuple[Path, np.ndarray]:
    data = np.random.default_rng(5).integers(0, 4000, (64, 128, 128)).astype("uint16")
    array = zarr.create_array(path, shape=data.shape, chunks=(1, 128, 128), dtype="uint16")
    array[...] = data
    return path, data


def test_the_report_counts_both_passes(tmp_path: Path) -> None:
    source, data = _slabs(tmp_path / "src.zarr")
    temp = tmp_path / "scratch.zarr"
    job = shardpipe.plan_rechunk(source, tmp_path / "out.zarr", temp_store=temp, **LAYOUT)
    assert job.intermediate is not None
    report = job.execute()
    copy, write = report.passes
    assert (copy.name, write.name) == (COPY, WRITE)
    # pass 1 read every slab once, stored the copy where the plan said, and deleted it
    assert copy.reads == 64 and copy.nbytes_read == data.nbytes
    assert copy.location == str(temp) and copy.removed and not temp.exists()
    assert copy.nbytes_stored == report.intermediate_nbytes > 0
    assert copy.blocks == 64 // job.intermediate.block_shape[0]
    # pass 2 read the copy's chunks and stored the target's shards
    assert write.reads == job.cost.reads > 0 and write.nbytes_read == data.nbytes
    assert write.nbytes_stored == report.nbytes > 0 and write.location is None
    assert copy.seconds > 0 and write.seconds > 0
    assert copy.seconds + write.seconds <= report.seconds
    shown = repr(report)
    assert "pass 1 of 2" in shown and "pass 2 of 2" in shown  # (long values cut to the width)
    text = str(report)
    assert f"pass 1 of 2 ({COPY}: " in text and "64 reads" in text and str(temp) in text
    assert_same(read_zarr(str(tmp_path / "out.zarr")), data)


def test_one_pass_reports_no_passes(tmp_path: Path) -> None:
    source, _ = _slabs(tmp_path / "src.zarr")
    report = shardpipe.plan_rechunk(
        source, tmp_path / "out.zarr", shards=(64, 128, 128), chunks=(1, 128, 128)
    ).execute()
    assert report.passes == () and "pass 1" not in repr(report) + str(report)


def _counts(stderr: str) -> list[tuple[str, int, int]]:
    """(description, done, total) of each state of the bars drawn."""
    found = re.findall(r"(?:^|\r)([^\r\n:]*?: ?[a-z]*): *\d+%\|[^|]*\| *(\d+)/(\d+) ", stderr)
    return [(what, int(n), int(total)) for what, n, total in found]


@pytest.mark.parametrize("where", ["threads", "cluster"])
def test_one_bar_across_both_passes_through_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], request: pytest.FixtureRequest, where: str
) -> None:
    if where == "cluster":
        request.getfixturevalue("cluster_client")  # current: the copy runs on its workers
    source, data = _slabs(tmp_path / "src.zarr")
    target = tmp_path / "out.zarr"
    job = shardpipe.plan_rechunk(source, target, temp_store=tmp_path / "t.zarr", **LAYOUT)
    assert job.intermediate is not None
    blocks, shards = 64 // job.intermediate.block_shape[0], job.write.plan.n_shards
    args = ["rechunk", str(source), str(target), "--shards", "64,128,128", "--chunks", "16,32,32"]
    args += ["--max-mem", "1MB", "--temp-store", str(tmp_path / "t.zarr"), "--progress"]
    assert main(args) == 0
    out, err = capsys.readouterr()
    states = _counts(err)
    assert states, err
    # one bar: one total, blocks then shards, its description saying the pass
    assert {total for _, _, total in states} == {blocks + shards}, states
    assert any(what.startswith("pass 1 of 2: copy") for what, _, _ in states), states
    # the copy's blocks were counted (as they were stored) before the second pass began
    second = [n for what, n, _ in states if what.startswith("pass 2 of 2")]
    assert second and second[0] >= blocks, states
    assert states[-1][0].startswith("pass 2 of 2: rechunk"), states
    assert states[-1][1] == blocks + shards, states
    assert "shardpipe:" not in err  # no second bar of the write's own
    # the command's report counts both passes
    assert f"pass 1 of 2 ({COPY}" in out and f"pass 2 of 2 ({WRITE}" in out
    assert_same(read_zarr(str(target)), data)


def test_the_plan_shows_the_plans_weighed(tmp_path: Path) -> None:
    source = tmp_path / "slabs.zarr"
    zarr.create_array(source, shape=(64, 512, 512), chunks=(1, 512, 512), dtype="uint16")
    job = shardpipe.plan_rechunk(
        source, tmp_path / "out.zarr", shards=(64, 256, 256), chunks=(64, 64, 64), max_mem="16MB"
    )
    assert job.weighed is not None
    shown = repr(job)
    for candidate in job.weighed.candidates:
        assert f"{candidate.kind}: blocks {candidate.block_shape}" in shown
    assert "read and decoded" in shown and "requests" in shown
    assert (
        f"model's choice: {job.weighed.chosen.kind}, the cheapest that fits the memory budget"
        in shown
    )
    # the plan runs the model's choice
    assert job.weighed.chosen.kind == "two passes" and job.intermediate is not None
    assert "this plan runs" not in shown


@pytest.mark.parametrize("resume", [True, False])
def test_the_same_call_again_goes_on_with_its_own_temp_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, resume: bool
) -> None:
    """A first pass that failed leaves the copy at the given temp_store (not shardpipe's to
    delete) and its record; the same call again carries on from it, with or without
    resume, where it was refused because the path exists."""
    from shardpipe.rechunking import raw_copy

    source, data = _slabs(tmp_path / "src.zarr")
    target, temp = tmp_path / "out.zarr", str(tmp_path / "scratch.zarr")
    store_block = raw_copy.store_block

    def failing(block: Any, store: Any, offset: Any, *args: Any) -> None:
        if offset[0] >= 32:
            raise OSError("the disk went away")
        store_block(block, store, offset, *args)

    monkeypatch.setattr(raw_copy, "store_block", failing)
    with pytest.raises(OSError, match="went away"):
        shardpipe.rechunk(source, target, temp_store=temp, **LAYOUT)
    assert Path(temp).is_dir()  # the user's path: kept, with the copied blocks
    monkeypatch.setattr(raw_copy, "store_block", store_block)
    job = shardpipe.plan_rechunk(source, target, temp_store=temp, resume=resume, **LAYOUT)
    report = job.execute()
    assert report.passes[0].location == temp, report  # the copy went on where it was
    assert_same(read_zarr(str(target)), data)
    assert not Path(temp).exists()


def test_a_resumed_second_pass_counts_only_the_reads_it_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second pass that failed midway is resumed: it skips the shards published and reads
    only the copy's chunks that feed the others, and its report says so. It counted the
    whole copy's reads (and blocks) whatever it skipped (found by a new-user trial)."""
    from shardpipe.rechunking import raw_copy
    from tests.support.rechunk_crash_child import LAYOUT as EIGHT_SHARDS
    from tests.support.rechunk_crash_child import slabs

    source, target = tmp_path / "src.zarr", tmp_path / "out.zarr"
    data = slabs(source)
    read_region = raw_copy.read_region
    chunks_read = [0]
    fail_after: list[int | None] = [None]

    def counted(store: Any, region: Any, chunk_shape: Any, *args: Any) -> Any:
        """The copy's reads in pass 2, counted in chunks of the copy."""
        n = 1
        for r, c in zip(region, chunk_shape, strict=True):
            n *= -(-(r.stop - r.start) // c)
        chunks_read[0] += n
        limit = fail_after[0]
        if limit is not None and chunks_read[0] > limit:
            raise OSError("the disk went away")
        return read_region(store, region, chunk_shape, *args)

    monkeypatch.setattr(raw_copy, "read_region", counted)
    with dask.config.set(scheduler="synchronous"):  # the shards in order: some, then the error
        full = shardpipe.plan_rechunk(source, tmp_path / "full.zarr", **EIGHT_SHARDS).execute()
        every = full.passes[1]
        assert every.reads == chunks_read[0] > 0
        chunks_read[0], fail_after[0] = 0, every.reads // 2
        with pytest.raises(OSError, match="went away"):
            shardpipe.rechunk(source, target, **EIGHT_SHARDS)
        published = shardpipe.verify(target).shards_present
        assert 0 < published < full.shards_written
        chunks_read[0], fail_after[0] = 0, None
        report = shardpipe.plan_rechunk(source, target, resume=True, **EIGHT_SHARDS).execute()
    copied, rewritten = report.passes
    assert report.shards_skipped == published and copied.blocks == 0
    assert rewritten.reads == chunks_read[0] < every.reads, (rewritten, every)
    assert 0 < rewritten.nbytes_read < every.nbytes_read
    assert 0 < rewritten.blocks < every.blocks
    assert f"{rewritten.reads:,} reads" in str(report)
    assert_same(read_zarr(str(target)), data)
