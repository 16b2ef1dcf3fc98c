"""verify at scale: only the shards present are checked, found by listing the shard prefix.

A grid of a million shards with eight present, and a ``zarr.json`` declaring
``2**40`` along each of three axes, verify in about a second: the store is
asked for the objects listed, never for every position of the grid (a store
that counts its requests refuses to go on past a few thousand), and memory
stays bounded (tracemalloc). Keys among the shards that name no shard of the
grid are problems; temporary files of a write are notes. On a LocalCluster
the checks run as tasks on the workers.
"""

from __future__ import annotations

import json
import math
import sys
import threading
import tracemalloc
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import dask
import numpy as np
import pytest
import zarr

import shardpipe
from shardpipe.cli.parser import main
from shardpipe.journal.leftovers import unfinished_work
from shardpipe.maintenance.unfinished import unfinished_jobs
from shardpipe.storage.local.store import LocalShardStore
from shardpipe.storage.resolve import ResolvedStore, resolve_store
from tests.support import spies

MILLION = (1000, 1000)
HUGE = (2**40, 2**40, 2**40)


@pytest.fixture
def threads() -> Iterator[None]:
    """Checks on threads even when a session's cluster client exists."""
    with dask.config.set(scheduler="threads"):
        yield


class CountingStore(LocalShardStore):
    """A local backend counting the requests for single objects.

    Past ``limit`` it raises: the caller is walking the grid, not the listing.
    """

    def __init__(self, root: Path, limit: int = 5_000) -> None:
        super().__init__(root, fsync=False)
        self.limit = limit
        self.requests = 0
        self._lock = threading.Lock()

    def _count(self) -> None:
        with self._lock:
            self.requests += 1
            if self.requests > self.limit:
                raise AssertionError(f"more than {self.limit} requests: the grid is walked")

    def get(self, key: str) -> bytes | None:
        self._count()
        return super().get(key)

    def get_range(self, key: str, start: int, stop: int) -> bytes:
        self._count()
        return super().get_range(key, start, stop)

    def size(self, key: str) -> int | None:
        self._count()
        return super().size(key)

    def version(self, key: str) -> str | None:
        self._count()
        return super().version(key)


def sparse_array(path: Path, shape: tuple[int, ...], ndim: int = 2) -> list[str]:
    """Eight shards of one element written, then ``zarr.json`` grown to ``shape``.

    Returns the keys of the shards present.
    """
    small = (2, 4) if ndim == 2 else (2, 2, 2)
    data = np.arange(1, 9, dtype="u1").reshape(small)
    shardpipe.to_sharded_zarr(data, str(path), shards=(1,) * ndim, chunks=(1,) * ndim)
    document = json.loads((path / "zarr.json").read_text())
    document["shape"] = list(shape)
    (path / "zarr.json").write_text(json.dumps(document))
    return sorted(str(p.relative_to(path)) for p in (path / "c").rglob("*") if p.is_file())


def counted(path: Path) -> tuple[ResolvedStore, CountingStore]:
    store = CountingStore(path)
    return ResolvedStore(zarr.storage.LocalStore(str(path)), store, ""), store


def test_a_million_shard_grid_with_eight_present_checks_only_those(
    tmp_path: Path, threads: None
) -> None:
    keys = sparse_array(tmp_path, MILLION)
    assert len(keys) == 8
    target, store = counted(tmp_path)
    tracemalloc.start()
    try:
        report = shardpipe.verify(target)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert report.ok, str(report)
    assert (report.n_shards, report.shards_present, report.shards_absent) == (
        10**6,
        8,
        10**6 - 8,
    )
    assert [check.key for check in report.shards] == keys  # grid order
    assert [check.coords for check in report.shards] == [(i, j) for i in (0, 1) for j in range(4)]
    assert report.chunks_stored == 8 and report.nbytes > 0
    assert store.requests < 100
    assert peak < 16 << 20
    assert "1,000,000 in grid, 8 present, 999,992 absent" in str(report)


def test_info_and_compact_on_a_million_shard_grid(tmp_path: Path, threads: None) -> None:
    sparse_array(tmp_path, MILLION)
    target, store = counted(tmp_path)
    about = shardpipe.info(target)
    assert isinstance(about, shardpipe.ArrayInfo)
    assert (about.n_shards, about.shards_present, about.chunks_stored) == (10**6, 8, 8)
    assert str(about).count("shards present: 8 of 1,000,000") == 1
    report = shardpipe.compact(target, threshold=0.0)
    assert (report.shards_checked, report.shards_rewritten) == (8, 0)
    assert shardpipe.repair(target).verify.shards_present == 8
    assert store.requests < 500


def test_a_zarr_json_of_2_40_along_three_axes(tmp_path: Path, threads: None) -> None:
    sparse_array(tmp_path, HUGE, ndim=3)
    target, store = counted(tmp_path)
    tracemalloc.start()
    try:
        report = shardpipe.verify(target)
        about = shardpipe.info(target)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert report.ok, str(report)
    assert report.n_shards == 2**120 == math.prod(HUGE)
    assert report.shards_present == 8 and report.shards_absent == 2**120 - 8
    assert f"{2**120:,} in grid, 8 present" in str(report)
    assert isinstance(about, shardpipe.ArrayInfo)
    assert (about.n_shards, about.shards_present) == (2**120, 8)
    assert store.requests < 100 and peak < 16 << 20


def test_keys_among_the_shards_that_name_no_shard_are_problems(
    tmp_path: Path, threads: None
) -> None:
    sparse_array(tmp_path, (2, 4))
    shard = (tmp_path / "c/0/1").read_bytes()
    strays = ["c/0/01", "c/2/0", "c/1/7/2", "c/x/1", "c/0/-1", "c/notes.txt"]
    for key in strays:
        (tmp_path / key).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / key).write_bytes(shard)
    (tmp_path / "c/0/.1.abc.shardpipe-tmp").write_bytes(b"partial")  # a note, not a stray
    report = shardpipe.verify(str(tmp_path))
    assert not report.ok
    assert sorted(key for key, _ in report.problems) == sorted(strays)
    past = {"c/2/0"}  # a shard position past the grid's end: what an unfinished append leaves
    for key, problem in report.problems:
        if key in past:
            assert problem.startswith("past the end of the array's (2, 4) grid"), problem
            assert "append again with resume=True" in problem
        else:
            assert "names no shard of its (2, 4) grid" in problem, problem
    assert report.shards_present == 8  # strays are no shards
    # elsewhere they are skipped: info counts them, compact and resume leave them alone
    about = shardpipe.info(str(tmp_path))
    assert isinstance(about, shardpipe.ArrayInfo)
    assert (about.shards_present, about.not_shards) == (8, len(strays))
    assert shardpipe.compact(str(tmp_path), threshold=0.0).shards_checked == 8
    assert all((tmp_path / key).read_bytes() == shard for key in strays)


def test_a_temporary_file_among_the_shards_is_a_note_or_with_complete_a_problem(
    tmp_path: Path, threads: None
) -> None:
    sparse_array(tmp_path, (2, 4))
    (tmp_path / "c/0/.1.abc.shardpipe-tmp").write_bytes(b"partial")
    report = shardpipe.verify(str(tmp_path))
    assert report.ok and report.shards_present == 8
    assert any("1 temporary file(s)" in note and "cleanup" in note for note in report.notes)
    strict = shardpipe.verify(str(tmp_path), complete=True)
    assert [key for key, _ in strict.problems] == ["c/0/.1.abc.shardpipe-tmp"]
    assert shardpipe.cleanup(str(tmp_path)) == 1
    assert shardpipe.verify(str(tmp_path), complete=True).ok


def test_a_damaged_shard_among_many_absent(tmp_path: Path, threads: None) -> None:
    sparse_array(tmp_path, MILLION)
    damage(tmp_path / "c/1/2")
    target, store = counted(tmp_path)
    report = shardpipe.verify(target)
    assert [key for key, _ in report.problems] == ["c/1/2"]
    assert "CRC32C mismatch" in report.problems[0][1]
    assert report.shards_present == 8 and store.requests < 100


def test_info_reports_shards_whose_index_is_damaged_as_verify_does(
    tmp_path: Path, threads: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """``info`` raised the first ShardFormatError; it reports them, as verify does (issue 39)."""
    sparse_array(tmp_path, MILLION)
    damage(tmp_path / "c/1/2")
    (tmp_path / "c/0/3").write_bytes(b"short")
    about = shardpipe.info(str(tmp_path))
    assert isinstance(about, shardpipe.ArrayInfo)
    assert about.problems == shardpipe.verify(str(tmp_path)).problems
    assert [key for key, _ in about.problems] == ["c/0/3", "c/1/2"]
    assert "CRC32C mismatch" in about.problems[1][1]
    assert (about.shards_present, about.chunks_stored) == (8, 6)  # the damaged ones: no chunk
    shards = [p for p in (tmp_path / "c").rglob("*") if p.is_file()]
    assert about.nbytes_stored == sum(p.stat().st_size for p in shards)
    assert "index not readable: c/1/2: " in str(about)
    assert "2 shard(s) whose index cannot be read" in repr(about)
    assert main(["info", str(tmp_path)]) == 0  # a description, with what it could not read
    assert "index not readable: c/0/3: " in capsys.readouterr().out


def damage(path: Path) -> None:
    """Flip a bit of the shard's index checksum (its last byte)."""
    data = path.read_bytes()
    path.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))


def test_past_the_entry_limit_clean_shards_are_counted_not_listed(
    tmp_path: Path, threads: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    sparse_array(tmp_path, MILLION)
    path = tmp_path / "c/1/3"
    path.write_bytes(b"short")
    monkeypatch.setattr(sys.modules["shardpipe.maintenance.verification"], "SHARD_ENTRIES", 3)
    report = shardpipe.verify(str(tmp_path))
    assert [check.key for check in report.shards] == ["c/0/0", "c/0/1", "c/0/2", "c/1/3"]
    assert report.shards_left_out == 4 and report.shards_present == 8
    assert "4 more checked clean are only counted" in str(report)


def test_progress_bar_and_command_line(
    tmp_path: Path, threads: None, capsys: pytest.CaptureFixture[str]
) -> None:
    sparse_array(tmp_path, MILLION)
    assert shardpipe.verify(str(tmp_path), progress=True).ok
    assert "8/8" in capsys.readouterr().err
    assert main(["verify", str(tmp_path), "--progress"]) == 0
    captured = capsys.readouterr()
    assert "8/8" in captured.err and "1,000,000 in grid, 8 present" in captured.out


@pytest.mark.cluster
def test_verify_runs_on_the_cluster(cluster_client: Any, tmp_path: Path) -> None:
    from distributed import get_task_stream

    sparse_array(tmp_path, MILLION)
    (tmp_path / "c/1/2").write_bytes(b"damaged")
    (tmp_path / "c/5000/0").parent.mkdir()
    (tmp_path / "c/5000/0").write_bytes(b"stray")
    with get_task_stream(cluster_client) as stream:
        report = shardpipe.verify(str(tmp_path))
    tasks = [t for t in stream.data if str(t["key"]).startswith("shardpipe-verify")]
    assert tasks  # the shards were checked on the workers
    # ncores asks the scheduler; scheduler_info() returns a cached value that the client's
    # periodic update may have just replaced with one that names no worker (seen in CI)
    assert {t["worker"] for t in tasks} <= set(cluster_client.ncores())
    assert sorted(key for key, _ in report.problems) == ["c/1/2", "c/5000/0"]
    assert (report.n_shards, report.shards_present) == (10**6, 8)


@pytest.mark.cluster
def test_a_memory_store_is_checked_here_even_with_a_cluster(cluster_client: Any) -> None:
    from distributed import get_task_stream

    store = zarr.storage.MemoryStore()
    with dask.config.set(scheduler="threads"):
        shardpipe.to_sharded_zarr(np.arange(1, 9, dtype="u1"), store, shards=(2,), chunks=(1,))
    with get_task_stream(cluster_client) as stream:
        report = shardpipe.verify(store)
    assert report.ok and report.shards_present == 4
    assert not [t for t in stream.data if str(t["key"]).startswith("shardpipe-verify")]


def test_the_records_of_a_finished_write_are_read_from_one_listing(tmp_path: Path) -> None:
    """After a finished write only its job record is there: one listing, one read."""
    x = np.arange(4 * 8 * 8, dtype="uint16").reshape(4, 8, 8)
    shardpipe.to_sharded_zarr(x, tmp_path / "a.zarr", shards=(4, 8, 8), chunks=(2, 4, 4))
    target = resolve_store(tmp_path / "a.zarr")
    counted = replace(target, shards=spies.CountingStore(target.shards))
    assert unfinished_jobs(counted) == [] and unfinished_work(counted) == []
    assert counted.shards.calls == ["list", "get"] * 2  # not a read of every kind
