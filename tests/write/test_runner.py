"""The job protocol and its runner: passes in order, together, abandoned on failure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np
import pytest
import zarr

import shardpipe
from shardpipe.engine.reports import WriteReport
from shardpipe.errors import InvalidArgumentError
from shardpipe.storage.resolve import ResolvedStore, resolve_store
from shardpipe.write.job import Job, Pass, PassReports, run_jobs, together


@dataclass
class _Steps:
    """A job of ``n`` passes that writes nothing and logs what the runner does with it."""

    name: str
    n: int
    log: list[str]
    target: ResolvedStore
    fail_at: int | None = None
    reports: list[Any] = field(default_factory=list)

    def summary_rows(self) -> list[tuple[str, str]]:
        return [("passes", str(self.n))]

    def passes(self) -> list[Pass]:
        def step(k: int) -> Pass:
            def begin(progress: bool) -> list[Any]:
                self.log.append(f"{self.name} begins {k}")
                if k == self.fail_at:
                    raise RuntimeError(f"{self.name} fails in {k}")
                return []

            def end(reports: Sequence[WriteReport]) -> None:
                self.log.append(f"{self.name} ends {k}")

            def abandon(err: BaseException) -> None:
                self.log.append(f"{self.name} abandons {k}")

            return Pass(f"step {k}", begin, end, abandon)

        return [step(k) for k in range(self.n)]

    def finish(self, reports: PassReports, seconds: float, snapshot_id: str | None) -> str:
        return f"{self.name}: {len(reports)} passes"


@pytest.fixture
def target(tmp_path: Path) -> ResolvedStore:
    return resolve_store(tmp_path / "t.zarr", None, None)


def test_a_pass_begins_after_every_job_ended_the_one_before(target: ResolvedStore) -> None:
    log: list[str] = []
    jobs = [_Steps("a", 2, log, target), _Steps("b", 1, log, target)]
    assert run_jobs(jobs) == ["a: 2 passes", "b: 1 passes"]
    assert log == ["a begins 0", "b begins 0", "a ends 0", "b ends 0", "a begins 1", "a ends 1"]


def test_a_failed_pass_is_abandoned_by_every_job_that_began_it(target: ResolvedStore) -> None:
    log: list[str] = []
    jobs = [_Steps("a", 2, log, target), _Steps("b", 2, log, target, fail_at=1)]
    with pytest.raises(RuntimeError, match="b fails in 1"):
        run_jobs(jobs)
    assert log[-3:] == ["b begins 1", "a abandons 1", "b abandons 1"]
    assert "a ends 1" not in log


def test_a_composite_runs_whole_jobs_and_splits_their_reports(target: ResolvedStore) -> None:
    log: list[str] = []
    parts = [_Steps("a", 2, log, target), _Steps("b", 1, log, target)]
    passes, finish = together(parts, before=lambda: log.append("groups"))
    merged = passes()
    assert len(merged) == 2
    for m in merged:
        assert m.begin(False) == []
        m.end([])
    assert log == [
        "groups",
        "a begins 0",
        "b begins 0",
        "a ends 0",
        "b ends 0",
        "a begins 1",
        "a ends 1",
    ]
    assert finish([[], []], 0.0, None) == ["a: 2 passes", "b: 1 passes"]


def test_commit_is_checked_before_any_pass_begins(target: ResolvedStore) -> None:
    log: list[str] = []
    with pytest.raises(InvalidArgumentError, match="not an Icechunk session"):
        run_jobs([_Steps("a", 1, log, target)], commit="message")
    assert log == []


def test_every_planned_job_follows_the_protocol(tmp_path: Path) -> None:
    volume = da.from_array(np.arange(4096, dtype="uint16").reshape(16, 16, 16), chunks=8)
    planned = [
        shardpipe.prepare_write(volume, tmp_path / "a.zarr"),
        shardpipe.plan_rechunk(volume, tmp_path / "b.zarr"),
        shardpipe.prepare_ome_zarr(volume, tmp_path / "c.zarr", "zyx"),
    ]
    for job in planned:
        assert isinstance(job, Job), type(job).__name__
        assert job.passes() and job.summary_rows()
    assert not list(tmp_path.iterdir())  # planning writes nothing


@dataclass
class _Writes:
    """A job of one pass that writes by itself (``Pass.write``) and reports ``shards``."""

    shards: int
    target: ResolvedStore

    def summary_rows(self) -> list[tuple[str, str]]:
        return [("shards", str(self.shards))]

    def passes(self) -> list[Pass]:
        return [Pass("write", write=lambda progress: [WriteReport(shards=self.shards)])]

    def finish(self, reports: PassReports, seconds: float, snapshot_id: str | None) -> int:
        return sum(r.shards for r in reports[0])


def test_a_pass_that_writes_by_itself_reports_to_its_job(target: ResolvedStore) -> None:
    log: list[str] = []
    assert run_jobs([_Steps("a", 1, log, target), _Writes(3, target), _Writes(5, target)]) == [
        "a: 1 passes",
        3,
        5,
    ]


def test_a_composite_hands_each_job_the_reports_of_its_own_writes(
    target: ResolvedStore,
) -> None:
    log: list[str] = []
    parts: list[Any] = [_Writes(3, target), _Steps("a", 2, log, target), _Writes(5, target)]
    passes, finish = together(parts)
    merged = passes()
    assert merged[0].write is not None and merged[1].write is None
    assert merged[0].begin(False) == []
    reports = list(merged[0].write(False))
    merged[0].end(reports)
    assert merged[1].begin(False) == []
    merged[1].end([])
    assert finish([reports, []], 0.0, None) == [3, "a: 2 passes", 5]


def test_a_batch_of_region_writes_is_a_job_of_the_runner(tmp_path: Path) -> None:
    from shardpipe.write.batch import _BatchTarget

    path = tmp_path / "a.zarr"
    shardpipe.to_sharded_zarr(np.zeros((16, 16), "uint16"), path, shards=(8, 8), chunks=(4, 4))
    batch = _BatchTarget.open(path, None, None, "auto", False, "64MB")
    values = [np.ones((4, 4), "uint16"), np.ones((2, 16), "uint16")]
    job = batch.job([((0, 4), (0, 4)), ((10, 12), (0, 16))], values)
    assert isinstance(job, Job)
    assert "3 touched" in repr(job)  # shards (0, 0), (1, 0), (1, 1)
    report = job.execute()
    assert report.shards == 3 and report.seconds > 0
    stored = np.asarray(zarr.open_array(path, mode="r")[...])
    expected = np.zeros((16, 16), "uint16")
    expected[:4, :4] = expected[10:12] = 1
    np.testing.assert_array_equal(stored, expected)


def test_every_marker_is_let_go_when_a_job_fails_at_its_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The jobs' last records are written while their markers are read: one failing stops none."""
    from shardpipe.journal.markers import JobKeys, read_marker
    from shardpipe.write.modes import NewArray

    x = da.arange(64, chunks=16, dtype="u1").reshape(8, 8).rechunk(4)
    jobs = [
        shardpipe.prepare_write(x, tmp_path / f"{name}.zarr", shards=(4, 4), chunks=(2, 2))
        for name in "ab"
    ]
    ended: list[str] = []
    end = NewArray.end

    def end_or_fail(self: NewArray, target: ResolvedStore) -> None:
        ended.append(str(target.zarr_store))
        if len(ended) == 1:
            raise OSError("no space left for the record")
        end(self, target)

    monkeypatch.setattr(NewArray, "end", end_or_fail)
    with pytest.raises(OSError, match="no space left"):
        run_jobs(jobs)
    assert len(ended) == 2  # the other job's record was still marked complete
    for name in "ab":
        target = resolve_store(tmp_path / f"{name}.zarr", None, None)
        assert read_marker(target.shards, JobKeys(target.key(""))) is None
        np.testing.assert_array_equal(zarr.open_array(tmp_path / f"{name}.zarr")[:], x.compute())


def test_a_failed_run_raises_its_own_error_when_letting_go_fails_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import shardpipe.write.run as write_run

    def boom(block: np.ndarray) -> np.ndarray:
        raise ValueError("the source failed")

    x = da.zeros((8, 8), chunks=4, dtype="u1").map_blocks(boom, dtype="u1")
    job = shardpipe.prepare_write(x, tmp_path / "a.zarr", shards=(4, 4), chunks=(2, 2))
    release = write_run.release

    def release_then_fail(*args: Any, **kwargs: Any) -> None:
        release(*args, **kwargs)
        raise OSError("the marker's folder went away")

    monkeypatch.setattr(write_run, "release", release_then_fail)
    with pytest.raises(ValueError, match="the source failed"):
        run_jobs([job])
    assert "the marker's folder went away" in caplog.text
