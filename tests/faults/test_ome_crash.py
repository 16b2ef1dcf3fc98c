"""kill -9 during a pyramid write and during a time-point append, then resume or repair.

On a file system and on S3 the interrupted image is settled by ``resume=True``
or ``repair``; in an Icechunk session nothing of it is visible until the
commit, so a kill leaves the branch where it was and the write is run again.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dask
import numpy as np
import pytest
import zarr

import shardpipe
from tests.support import REPOSITORY
from tests.support.fork_server import ForkServer, wait_for_word
from tests.support.ome_checks import check_image, left_by_an_unfinished_write, reference_pyramid
from tests.support.ome_crash_child import FACTORS, ICECHUNK_PATH, KWARGS, image


def _shard_files(root: Path) -> int:
    return sum(1 for p in root.rglob("c/*/*/*/*") if p.is_file() and not p.name.startswith("."))


def _shard_objects(url: str, options: dict[str, Any] | None) -> int:
    """Shard objects under ``url`` (an S3 prefix): keys with a ``c/`` part, none hidden."""
    import boto3

    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    endpoint = (options or {})["client_kwargs"]["endpoint_url"]
    pages = boto3.client("s3", endpoint_url=endpoint).get_paginator("list_objects_v2")
    keys: list[str] = []
    for page in pages.paginate(Bucket=bucket, Prefix=prefix):
        keys += [o["Key"] for o in page.get("Contents", [])]
    return sum(1 for k in keys if "/c/" in k and ".shardpipe" not in k)


def _kill_child(
    server: ForkServer,
    target: Path | str,
    progress: Path,
    what: str,
    after: int,
    delay: float,
    options: dict[str, Any] | None = None,
) -> bool:
    """Start the child, SIGKILL it ``delay`` s after ``after`` shard files exist; finished?"""
    args = [str(target), str(progress), what]
    if options is not None:
        args.append(json.dumps(options))
    proc = server.start("tests.support.ome_crash_child", args, cwd=REPOSITORY)
    count: Callable[[], int]
    if options is not None:
        count = lambda: _shard_objects(str(target), options)  # noqa: E731
    elif str(target).startswith("icechunk:"):
        chunks = Path(str(target).removeprefix("icechunk:")) / "chunks"
        count = lambda: sum(1 for _ in chunks.iterdir()) if chunks.exists() else 0  # noqa: E731
    else:
        count = lambda: _shard_files(Path(target))  # noqa: E731
    try:
        wait_for_word(progress, "started", proc)
        deadline = time.monotonic() + 120
        while count() < after and "done" not in progress.read_text():
            assert proc.poll() is None or "done" in progress.read_text(), proc.stderr()
            assert time.monotonic() < deadline
            time.sleep(0.005 if options is None else 0.05)  # listings load the S3 server
        time.sleep(delay)
        proc.kill()
        proc.wait()
    finally:
        proc.kill()
        proc.wait()
    return "done" in progress.read_text()


def _model(t: int, *appended: tuple[int, int]) -> list[np.ndarray]:
    with dask.config.set(scheduler="threads"):
        data = image(t, slow=False).compute()
        for n, seed in appended:
            data = np.concatenate([data, image(n, seed=seed, slow=False).compute()])
    return reference_pyramid(data, FACTORS, "mean")


@pytest.mark.parametrize("run", range(3))
def test_sigkill_during_a_pyramid_write_then_resume(
    tmp_path: Path, run: int, fork_server: ForkServer
) -> None:
    target = tmp_path / "img.ome.zarr"
    delay = random.Random(run).uniform(0.0, 1.5)
    finished = _kill_child(
        fork_server, target, tmp_path / "progress", "write", after=4 * run, delay=delay
    )
    if (target / "zarr.json").exists():
        report = shardpipe.verify(str(target))
        if not finished:  # the group says the write is unfinished
            assert any("unfinished write" in p for _, p in report.problems), str(report)
        # no shard is torn, whatever the kill left: besides the unfinished write, only the
        # levels whose zarr.json it had not written yet (a kill between two levels)
        assert all(left_by_an_unfinished_write(p) for _, p in report.problems), str(report)
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
    tmp_path: Path, run: int, settle: str, fork_server: ForkServer
) -> None:
    target = tmp_path / "img.ome.zarr"
    with dask.config.set(scheduler="threads"):
        shardpipe.to_ome_zarr(image(slow=False), target, "tzyx", **KWARGS)
    before = _shard_files(target)
    delay = random.Random(100 + run).uniform(0.0, 1.0)
    finished = _kill_child(
        fork_server, target, tmp_path / "progress", "append", after=before + run, delay=delay
    )
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


@pytest.mark.s3
@pytest.mark.parametrize(("what", "settle"), [("write", "resume"), ("append", "repair")])
def test_sigkill_on_s3_then_resume_or_repair(
    tmp_path: Path,
    s3_bucket: tuple[str, dict[str, Any]],
    what: str,
    settle: str,
    fork_server: ForkServer,
) -> None:
    """The same kills against S3 (the moto server): objects are whole or absent, and the
    group's record and the arrays' undo records settle the image as on a file system."""
    bucket, options = s3_bucket
    url = f"s3://{bucket}/img.ome.zarr"
    before = 0
    if what == "append":
        with dask.config.set(scheduler="threads"):
            shardpipe.to_ome_zarr(image(slow=False), url, "tzyx", storage_options=options, **KWARGS)
        before = _shard_objects(url, options)
    finished = _kill_child(fork_server, url, tmp_path / "progress", what, before + 2, 0.3, options)
    with dask.config.set(scheduler="threads"):
        if settle == "resume":
            shardpipe.to_ome_zarr(
                image(), url, "tzyx", resume=True, storage_options=options, **KWARGS
            )
            expected = _model(3)
        else:
            repaired = shardpipe.repair(url, storage_options=options)
            assert repaired.ok, str(repaired)
            expected = _model(3, (2, 7)) if finished else _model(3)
    group = zarr.open_group(url, mode="r", storage_options=options)
    endpoint = options["client_kwargs"]["endpoint_url"]

    def kvstore(level: str) -> dict[str, Any]:
        return {
            "driver": "s3",
            "bucket": bucket,
            "path": f"img.ome.zarr/{level}/",
            "endpoint": endpoint,
            "aws_region": "us-east-1",
            "aws_credentials": {"type": "environment"},
        }

    check_image(group, expected, kvstore=kvstore)
    report = shardpipe.verify(url, storage_options=options, complete=True)
    assert report.ok, str(report)
    assert not finished  # the kill landed mid-write


@pytest.mark.parametrize("what", ["write", "append"])
def test_sigkill_in_an_icechunk_session_leaves_the_branch_then_runs_again(
    tmp_path: Path, what: str, fork_server: ForkServer
) -> None:
    """Shard objects stored before the kill belong to no snapshot: ``main`` reads as before."""
    import icechunk

    icechunk.set_logs_filter("error")
    storage = icechunk.local_filesystem_storage(str(tmp_path / "repo"))
    repo = icechunk.Repository.create(storage)
    if what == "append":
        with dask.config.set(scheduler="threads"):
            shardpipe.prepare_ome_zarr(
                image(slow=False),
                repo.writable_session("main"),
                "tzyx",
                path=ICECHUNK_PATH,
                **KWARGS,
            ).execute(commit="an image")
    base = repo.lookup_branch("main")
    chunks = tmp_path / "repo" / "chunks"
    stored = sum(1 for _ in chunks.iterdir()) if chunks.exists() else 0
    target = f"icechunk:{tmp_path / 'repo'}"
    finished = _kill_child(
        fork_server, target, tmp_path / "progress", what, after=stored + 3, delay=0.2
    )
    assert not finished  # the kill landed mid-write
    assert sum(1 for _ in chunks.iterdir()) > stored  # objects no snapshot refers to
    reopened = icechunk.Repository.open(storage)
    assert reopened.lookup_branch("main") == base
    session = reopened.readonly_session("main")
    if what == "append":  # the image as it was committed, every level
        group = zarr.open_group(session.store, path=ICECHUNK_PATH, mode="r")
        check_image(group, _model(3))
    else:  # no image at all
        with pytest.raises(FileNotFoundError):
            zarr.open_group(session.store, path=ICECHUNK_PATH, mode="r")
    with dask.config.set(scheduler="threads"):  # and the write runs again from the branch
        session = reopened.writable_session("main")
        if what == "append":
            shardpipe.to_ome_zarr(
                image(2, seed=7), session, path=ICECHUNK_PATH, append_dim="t", commit="again"
            )
        else:
            shardpipe.to_ome_zarr(
                image(), session, "tzyx", path=ICECHUNK_PATH, commit="again", **KWARGS
            )
    group = zarr.open_group(reopened.readonly_session("main").store, path=ICECHUNK_PATH, mode="r")
    check_image(group, _model(3, (2, 7)) if what == "append" else _model(3))
