"""kill -9 during a pyramid write and during a time-point append, then resume or repair."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import dask
import numpy as np
import pytest

import shardpipe
from tests.support.crash_child import wait_for
from tests.support.ome_checks import check_image, reference_pyramid
from tests.support.ome_crash_child import FACTORS, KWARGS, image

ROOT = Path(__file__).parent.parent.parent


def _shard_files(root: Path) -> int:
    return sum(1 for p in root.rglob("c/*/*/*/*") if p.is_file() and not p.name.startswith("."))


def _kill_child(target: Path, progress: Path, what: str, after: int, delay: float) -> bool:
    """Start the child, SIGKILL it ``delay`` s after ``after`` shard files exist; finished?"""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.ome_crash_child", str(target), str(progress), what],
        cwd=ROOT,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for(progress, "started", proc)
        deadline = time.monotonic() + 120
        while _shard_files(target) < after and "done" not in progress.read_text():
            assert proc.poll() is None or "done" in progress.read_text(), proc.stderr
            assert time.monotonic() < deadline
            time.sleep(0.005)
        time.sleep(delay)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    return "done" in progress.read_text()


def _model(t: int, *appended: tuple[int, int]) -> list[np.ndarray]:
    with dask.config.set(scheduler="threads"):
        data = image(t).compute()
        for n, seed in appended:
            data = np.concatenate([data, image(n, seed=seed).compute()])
    return reference_pyramid(data, FACTORS, "mean")


@pytest.mark.parametrize("run", range(3))
def test_sigkill_during_a_pyramid_write_then_resume(tmp_path: Path, run: int) -> None:
    target = tmp_path / "img.ome.zarr"
    delay = random.Random(run).uniform(0.0, 1.5)
    finished = _kill_child(target, tmp_path / "progress", "write", after=4 * run, delay=delay)
    if (target / "zarr.json").exists():
        report = shardpipe.verify(str(target))
        if not finished:  # the group says the write is unfinished
            assert any("unfinished write" in p for _, p in report.problems), str(report)
        # no shard is torn, whatever the kill left
        assert not [p for _, p in report.problems if "unfinished" not in p], str(report)
    job = shardpipe.prepare_ome_zarr(image(), target, "tzyx", resume=True, **KWARGS)
    kept = sum(j.n_shards_skipped for j in job.jobs)
    done = job.execute()
    written = sum(r.shards for r in done.levels.values())
    assert kept + written == sum(j.plan.n_shards for j in job.jobs)  # the rest, each once
    check_image(target, _model(3))
    report = shardpipe.verify(str(target), complete=True)
    assert report.ok, str(report)
    assert not finished  # the kill landed mid-write


@pytest.mark.parametrize(("run", "settle"), [(0, "resume"), (1, "repair"), (2, "resume"),
                                             (3, "repair")])  # fmt: skip
def test_sigkill_during_a_time_point_append_then_resume_or_repair(
    tmp_path: Path, run: int, settle: str
) -> None:
    target = tmp_path / "img.ome.zarr"
    with dask.config.set(scheduler="threads"):
        shardpipe.to_ome_zarr(image(), target, "tzyx", **KWARGS)
    before = _shard_files(target)
    delay = random.Random(100 + run).uniform(0.0, 1.0)
    finished = _kill_child(target, tmp_path / "progress", "append", after=before + run, delay=delay)
    if settle == "resume":
        with dask.config.set(scheduler="threads"):
            shardpipe.to_ome_zarr(image(2, seed=7), target, append_dim="t", resume=True)
        expected = _model(3, (2, 7))
    else:
        repaired = shardpipe.repair(str(target))
        assert repaired.ok, str(repaired)
        assert not (target / ".shardpipe" / "ome-write.json").exists()  # the record is settled
        expected = _model(3, (2, 7)) if finished else _model(3)
    check_image(target, expected)
    report = shardpipe.verify(str(target), complete=True)
    assert report.ok, str(report)
    assert not finished  # the kill landed mid-append
