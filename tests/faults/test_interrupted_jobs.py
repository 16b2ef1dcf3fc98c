"""``verify`` and ``info`` report every kind of interrupted job the same way, with its resume hint.

Each job runs in a process forked by :mod:`tests.support.kill_at_key_child`
and is killed (``SIGKILL``) right after a chosen key is written: a write of
a new array after its first shard (and before its ``zarr.json``: only its record
is there), a region write into it after its first
shard, an OME-Zarr write once its group's ``zarr.json`` is there, a
precomputed write once its ``info`` is there, a two-pass rechunk once its
target's ``zarr.json`` is there (the intermediate copy complete), a
migration in place once its marker is there. Then ``verify`` and ``info``,
called from Python and run as commands, must each list the job under
"interrupted jobs" in the same line, whose hint names the call (or, on the
command line, the command and its flag) that carries it on.
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from pathlib import Path

import pytest

import shardpipe
from shardpipe.cli.parser import main as cli_main
from shardpipe.journal.unfinished import UnfinishedJob
from tests.support.fork_server import ForkServer
from tests.support.kill_at_key_child import kill_at_keys
from tests.support.run_once import once_per_run


@dataclass(frozen=True)
class Point:
    """A job killed at a key, and what verify and info must then say of it."""

    name: str
    what: str
    key: str
    path: str | None
    kind: str
    record: str
    python_hint: str
    cli_hint: str


POINTS = [
    Point(
        "array-records-only",  # killed before the array's zarr.json: nothing but the record
        "array",
        "a/.shardpipe/write.json",
        "a",
        "write",
        "a/.shardpipe/write.json",
        "run the same write with resume=True",
        "run the same write with resume=True (a Python call) or --resume (a command)",
    ),
    Point(
        "array",
        "array",
        "a/c/0/0/0",
        "a",
        "write",
        "a/.shardpipe/write.json",
        "run the same write with resume=True",
        "run the same write with resume=True (a Python call) or --resume (a command)",
    ),
    Point(
        "update",
        "update",
        "a/c/0/0/0",
        "a",
        "update",
        "a/.shardpipe/job.json",
        "run the same region write or append with resume=True",
        "run the same region write or append with resume=True (a Python call) or --resume "
        "(a command)",
    ),
    Point(
        "ome",
        "ome",
        "zarr.json",
        None,
        "ome",
        ".shardpipe/ome-write.json",
        "run the same shardpipe.to_ome_zarr call with resume=True",
        "run the same `shardpipe write-ome-zarr` command with --resume",
    ),
    Point(
        "precomputed",
        "precomputed",
        "info",
        None,
        "precomputed",
        ".shardpipe/precomputed-write.json",
        "write it again with overwrite=True",
        "write it again with --overwrite",
    ),
    Point(
        "rechunk",
        "rechunk",
        "zarr.json",
        None,
        "rechunk-copy",
        ".shardpipe/intermediate.json",
        "run the same shardpipe.rechunk call with resume=True",
        "run the same `shardpipe rechunk` command with --resume",
    ),
    Point(
        "migration",
        "migration",
        ".shardpipe/migrate.json",
        None,
        "migration",
        ".shardpipe/migrate.json",
        "run the same shardpipe.migrate call again, as that run was called",
        "run the same `shardpipe migrate` command again, as that run was called",
    ),
]


@pytest.fixture(scope="session")
def killed(tmp_path_factory: pytest.TempPathFactory, fork_server: ForkServer) -> dict[str, Path]:
    """Each point's job, killed at its key: the target by kind of job (read only)."""

    def kill() -> dict[str, str]:
        points = [[p.what, p.key, "written"] for p in POINTS]
        results = kill_at_keys(
            tmp_path_factory.mktemp("interrupted"), points, timeout=600, server=fork_server
        )
        for point, result in zip(POINTS, results, strict=True):
            assert result["killed"], f"{point.name} never wrote {point.key}"
        return {p.name: r["target"] for p, r in zip(POINTS, results, strict=True)}

    found = once_per_run(tmp_path_factory, "interrupted-jobs", kill)
    return {name: Path(target) for name, target in found.items()}


def _job(jobs: list[UnfinishedJob], kind: str) -> UnfinishedJob:
    found = [job for job in jobs if job.kind == kind]
    assert len(found) == 1, jobs
    return found[0]


def _cli(*argv: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        cli_main(list(argv))
    return out.getvalue()


@pytest.mark.parametrize("point", POINTS, ids=[p.name for p in POINTS])
def test_verify_and_info_report_the_job_and_how_to_carry_it_on(
    killed: dict[str, Path], point: Point
) -> None:
    target = killed[point.name]
    checked = shardpipe.verify(str(target), point.path)
    described = shardpipe.info(str(target), point.path)
    job = _job(checked.interrupted, point.kind)
    assert job == _job(described.interrupted, point.kind)
    assert job.key == point.record
    assert (target / point.record).exists()
    assert job.resume == point.python_hint
    line = f"  {job.key}: {job.describe()}"
    assert line in str(checked).splitlines()
    assert line in str(described).splitlines()
    assert "interrupted jobs: " in str(checked)
    where = ["--path", point.path] if point.path else []
    for command in ("verify", "info"):
        printed = _cli(command, str(target), *where)
        lines = [ln for ln in printed.splitlines() if ln.startswith(f"  {point.record}: ")]
        assert len(lines) == 1, printed
        assert lines[0].endswith(f": {point.cli_hint}"), lines[0]


def test_a_killed_rechunk_reports_its_target_write_and_its_copy(killed: dict[str, Path]) -> None:
    jobs = shardpipe.verify(str(killed["rechunk"])).interrupted
    assert [job.kind for job in jobs] == ["write", "rechunk-copy"]
    assert jobs[0].resume == "run the same shardpipe.rechunk call with resume=True"
    assert "its copy complete" in jobs[1].writing


def test_verify_complete_counts_an_interrupted_write_as_a_problem(
    killed: dict[str, Path],
) -> None:
    plain = shardpipe.verify(str(killed["array"]), "a")
    complete = shardpipe.verify(str(killed["array"]), "a", complete=True)
    job = _job(complete.interrupted, "write")
    assert plain.ok
    assert not complete.ok
    assert (job.key, job.describe()) in complete.problems


def test_a_location_holding_only_a_record_is_reported_not_refused(
    killed: dict[str, Path],
) -> None:
    target = killed["array-records-only"]
    assert not (target / "a" / "zarr.json").exists()
    checked = shardpipe.verify(str(target), "a")
    assert not checked.ok
    assert [job.kind for job in checked.interrupted] == ["write"]
    described = shardpipe.info(str(target), "a")
    assert isinstance(described, shardpipe.GroupInfo) and not described.arrays
    assert described.interrupted == checked.interrupted
