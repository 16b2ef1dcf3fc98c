"""Region writes and appends into existing arrays, read back by zarr-python and tensorstore."""

from __future__ import annotations

import functools
import json
import os
import time
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np
import pytest
import zarr

import shardpipe
from shardpipe.errors import InvalidArgumentError, JobConflictError
from tests.support.readers import assert_same, read_zarr
from tests.support.volumes import NO_FSYNC, check_volume, uneven_volume, write_volume

STRATEGIES = ["auto", "in_place", "append", "rewrite"]
_write = functools.partial(write_volume, dask_chunks=(13, 11, 16))


@pytest.mark.parametrize("index_location", ["end", "start"])
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("compressed", [True, False], ids=["zstd", "raw"])
def test_region_writes_keep_every_other_byte(
    tmp_path: Path, index_location: str, strategy: str, compressed: bool
) -> None:
    path = tmp_path / "a.zarr"
    data = uneven_volume((40, 30, 32))
    compressors: Any = "auto" if compressed else None
    _write(path, data, index_location=index_location, compressors=compressors)
    rng = np.random.default_rng(1)
    # aligned with inner chunks, misaligned, one element, a whole shard
    regions = [
        (slice(4, 12), slice(8, 16), slice(0, 32)),
        (slice(3, 21), slice(5, 22), slice(7, 30)),
        (slice(39, 40), slice(29, 30), slice(31, 32)),
        (slice(16, 32), slice(0, 16), slice(16, 32)),
    ]
    for region in regions:
        shape = tuple(s.stop - s.start for s in region)
        new = uneven_volume(shape, seed=int(rng.integers(1 << 30)))
        report = shardpipe.prepare_write(
            da.from_array(new, chunks=(5, 7, 9)),
            str(path),
            region=region,
            write_strategy=strategy,
            storage_options=NO_FSYNC,
        ).execute()
        data[region] = new
        check_volume(path, data)
        if strategy in ("in_place", "append", "rewrite"):
            # in place appends what does not fit; a shard keeping no chunk is rewritten
            allowed = {strategy, "rewrite", "unchanged"} | (
                {"append"} if strategy == "in_place" else set()
            )
            assert set(report.strategies) <= allowed, report
    if not compressed and strategy in ("auto", "in_place"):
        assert shardpipe.info(str(path)).nbytes_unused == 0  # fixed-size chunks stay in place


@pytest.mark.parametrize("index_location", ["end", "start"])
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_append_grows_the_array(tmp_path: Path, index_location: str, strategy: str) -> None:
    path = tmp_path / "a.zarr"
    data = uneven_volume((10, 30, 32))
    _write(path, data, index_location=index_location)
    for step in range(4):
        new = uneven_volume((7, 30, 32), seed=step + 5)
        shardpipe.to_sharded_zarr(
            da.from_array(new, chunks=(3, 30, 32)),
            str(path),
            append_dim=0,
            write_strategy=strategy,
            storage_options=NO_FSYNC,
        )
        data = np.concatenate([data, new])
        check_volume(path, data)
    # along another axis, fill value beyond the old edge included
    new = uneven_volume((data.shape[0], 30, 5), seed=9)
    shardpipe.to_sharded_zarr(new, str(path), append_dim=-1, storage_options=NO_FSYNC)
    check_volume(path, np.concatenate([data, new], axis=2))


def test_compact_reclaims_unused_bytes_and_info_reports_them(tmp_path: Path) -> None:
    path = tmp_path / "a.zarr"
    data = uneven_volume((32, 32, 32))
    _write(path, data)
    for seed in range(3):
        new = uneven_volume((4, 8, 8), seed=seed + 20)
        shardpipe.to_sharded_zarr(
            new,
            str(path),
            region=(slice(4, 8), slice(8, 16), slice(0, 8)),
            write_strategy="append",
            storage_options=NO_FSYNC,
        )
        data[4:8, 8:16, 0:8] = new
    before = shardpipe.info(str(path))
    assert before.nbytes_unused > 0 and before.unused_ratio > 0
    assert shardpipe.verify(str(path)).unused_ratio == pytest.approx(before.unused_ratio)
    report = shardpipe.compact(str(path), threshold=0.0)
    assert report.shards_rewritten == 1
    after = shardpipe.info(str(path))
    assert after.nbytes_unused == 0
    assert before.nbytes_stored - after.nbytes_stored == before.nbytes_unused
    assert after.chunks_stored == before.chunks_stored
    check_volume(path, data)


def test_update_on_a_cluster(cluster_client: Any, tmp_path: Path) -> None:
    path = tmp_path / "a.zarr"
    data = uneven_volume((40, 30, 32))
    _write(path, data)
    new = uneven_volume((30, 20, 20), seed=3)
    shardpipe.to_sharded_zarr(
        da.from_array(new, chunks=(7, 9, 20)),
        str(path),
        region=(slice(5, 35), slice(5, 25), slice(10, 30)),
        storage_options=NO_FSYNC,
    )
    data[5:35, 5:25, 10:30] = new
    check_volume(path, data)


def _snapshot(path: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()
    }


@pytest.mark.parametrize(
    ("source_shape", "kwargs", "parameter", "match"),
    [
        ((4, 4, 4), {"region": (slice(30, 44), slice(0, 4), slice(0, 4))}, "region", "outside"),
        ((4, 4, 4), {"region": (slice(0, 4), slice(0, 4))}, "region", "2 slice"),
        ((4, 4, 4), {"region": (slice(0, 5), slice(0, 4), slice(0, 4))}, "region", "source has 4"),
        ((4, 4, 4), {"region": [0, 1, 2]}, "region", "tuple of slices"),
        ((4, 4, 4), {"region": (slice(0, 8, 2), slice(0, 4), slice(0, 4))}, "region", "step"),
        ((4, 5, 32), {"append_dim": 0}, "append_dim", "dimension 1 is 5"),
        ((4, 32, 5), {"append_dim": 0}, "append_dim", r"shape \(k, 32, 32\)"),
        ((4, 32, 32), {"append_dim": 3}, "append_dim", "not an axis"),
        ((4, 4, 4), {"region": (slice(0, 4),) * 3, "append_dim": 0}, "region", "both"),
        ((4, 4, 4), {"region": (slice(0, 4),) * 3, "overwrite": True}, "overwrite", "contradicts"),
        ((4, 4, 4), {"region": (slice(0, 4),) * 3, "shards": (8, 8, 8)}, "shards", "differs"),
        ((4, 4, 4), {"region": (slice(0, 4),) * 3, "attributes": {"a": 1}}, "attributes", "cannot"),
        (
            (4, 4, 4),
            {"region": (slice(0, 4),) * 3, "write_strategy": "fast"},
            "write_strategy",
            "unknown",
        ),
        ((4, 4, 4), {"write_strategy": "append"}, "write_strategy", "new array"),
    ],
)
def test_bad_input_names_the_parameter_and_writes_nothing(
    tmp_path: Path, source_shape: Any, kwargs: Any, parameter: str, match: str
) -> None:
    path = tmp_path / "a.zarr"
    _write(path, uneven_volume((32, 32, 32)))
    before = _snapshot(path)
    kwargs = dict(kwargs)
    target = str(path) if "region" in kwargs or "append_dim" in kwargs else str(tmp_path / "b")
    with pytest.raises(InvalidArgumentError, match=match) as info:
        shardpipe.to_sharded_zarr(uneven_volume(source_shape), target, **kwargs)
    assert info.value.parameter == parameter
    assert _snapshot(path) == before
    assert not (tmp_path / "b").exists()


def test_dtype_and_target_mismatches(tmp_path: Path) -> None:
    path = tmp_path / "a.zarr"
    _write(path, uneven_volume((32, 32, 32)))
    region = (slice(0, 4),) * 3
    with pytest.raises(InvalidArgumentError, match="dtype float32") as info:
        shardpipe.to_sharded_zarr(np.zeros((4, 4, 4), "float32"), str(path), region=region)
    assert info.value.parameter == "arr"
    plain = tmp_path / "plain.zarr"
    zarr.create_array(str(plain), shape=(8, 8, 8), dtype="uint16", chunks=(4, 4, 4))
    with pytest.raises(InvalidArgumentError, match="not sharded") as info:
        shardpipe.to_sharded_zarr(np.zeros((4, 4, 4), "uint16"), str(plain), region=region)
    assert info.value.parameter == "region"
    with pytest.raises(InvalidArgumentError, match="no Zarr v3 array") as info:
        shardpipe.to_sharded_zarr(
            np.zeros((4, 4, 4), "uint16"), str(tmp_path / "none"), append_dim=0
        )
    assert info.value.parameter == "append_dim"
    memory = zarr.storage.MemoryStore()
    # a store in this process's memory: not from worker processes
    with dask.config.set(scheduler="threads"):
        shardpipe.to_sharded_zarr(np.zeros((8, 8, 8), "uint16"), memory, shards=(8, 8, 8))
        with pytest.raises(InvalidArgumentError, match="needs writes at an offset"):
            shardpipe.to_sharded_zarr(
                np.ones((4, 4, 4), "uint16"), memory, region=region, write_strategy="in_place"
            )
        shardpipe.to_sharded_zarr(np.ones((4, 4, 4), "uint16"), memory, region=region)
    expected = np.zeros((8, 8, 8), "uint16")
    expected[:4, :4, :4] = 1
    assert_same(np.asarray(zarr.open_array(memory, mode="r")[...]), expected)


def _plant_marker(path: Path, pid: int, host: str | None = None) -> None:
    import socket

    marker = {
        "job": "deadbeef",
        "action": "update",
        "host": host or socket.gethostname(),
        "pid": pid,
        "started": 0.0,
    }
    (path / ".shardpipe").mkdir(exist_ok=True)
    (path / ".shardpipe" / "job.json").write_text(json.dumps(marker))


def test_a_live_job_marker_stops_other_jobs(tmp_path: Path) -> None:
    path = tmp_path / "a.zarr"
    data = uneven_volume((32, 32, 32))
    _write(path, data)
    _plant_marker(path, os.getppid())  # a live process of this machine
    before = _snapshot(path)
    region = (slice(0, 4),) * 3
    for call in (
        lambda: shardpipe.to_sharded_zarr(np.ones((4, 4, 4), "uint16"), str(path), region=region),
        lambda: _write(path, data, overwrite=True),
        lambda: shardpipe.compact(str(path)),
        lambda: shardpipe.repair(str(path)),
        lambda: shardpipe.cleanup(str(path)),
    ):
        with pytest.raises(JobConflictError, match=r"deadbeef.*repair"):
            call()
    assert _snapshot(path) == before
    # force takes over (the job is known to be dead)
    assert shardpipe.repair(str(path), force=True).ok
    check_volume(path, data)


@pytest.mark.parametrize("region", [True, False], ids=["region", "append"])
def test_an_update_planned_before_the_array_changed_writes_nothing(
    tmp_path: Path, region: bool
) -> None:
    path = tmp_path / "a.zarr"
    data = uneven_volume((32, 32, 32))
    shardpipe.to_sharded_zarr(
        data, str(path), shards=(16, 16, 16), chunks=(8, 8, 8), storage_options=NO_FSYNC
    )
    new = da.from_array(uneven_volume((16, 32, 32), seed=1), chunks=(16, 32, 32))
    rows = (slice(0, 16), slice(None), slice(None))
    where: dict[str, Any] = {"region": rows} if region else {"append_dim": 0}
    job = shardpipe.prepare_write(new, str(path), storage_options=NO_FSYNC, **where)
    zarr.open_array(str(path)).attrs["changed"] = True  # another writer, after the plan
    before = _snapshot(path)
    with pytest.raises(JobConflictError, match=r"zarr\.json changed since this update"):
        job.execute()
    assert _snapshot(path) == before  # not a byte, and the marker let go
    check_volume(path, data)


def test_a_dead_jobs_marker_is_repaired_by_the_next_write(tmp_path: Path) -> None:
    path = tmp_path / "a.zarr"
    data = uneven_volume((32, 32, 32))
    _write(path, data)
    _plant_marker(path, 2**22 + 12345)  # no such process
    shardpipe.to_sharded_zarr(np.ones((4, 4, 4), "uint16"), str(path), region=(slice(0, 4),) * 3)
    data[:4, :4, :4] = 1
    check_volume(path, data)


def _fail_in_one_block(block: np.ndarray, block_info: Any = None) -> np.ndarray:
    if block_info is not None and block_info[0]["chunk-location"] == (1, 1, 1):
        raise RuntimeError("injected failure")
    return block


def _fail_at_once_while_another_block_is_slow(
    block: np.ndarray, block_info: Any = None
) -> np.ndarray:
    if block_info is not None and block_info[0]["chunk-location"] == (1, 1, 1):
        raise RuntimeError("injected failure")
    if block_info is not None and block_info[0]["chunk-location"] == (0, 0, 0):
        time.sleep(0.5)  # still running when the failure is raised
    return block


@pytest.mark.parametrize("scheduler", [None, "threads"])
@pytest.mark.parametrize("strategy", ["in_place", "append", "rewrite", "overwrite"])
def test_nothing_is_written_after_a_failed_write_returns(
    tmp_path: Path, strategy: str, scheduler: str | None
) -> None:
    """A write that raises has waited for its running tasks: the store does not change
    afterwards (with Dask's default scheduler too, where none is configured)."""
    path = tmp_path / "a.zarr"
    data = uneven_volume((32, 32, 32))
    _write(path, data)
    source = da.from_array(uneven_volume((32, 32, 32), seed=4), chunks=(16, 16, 16))
    source = source.map_blocks(_fail_at_once_while_another_block_is_slow, dtype=data.dtype)
    kwargs: dict[str, Any] = (
        {"overwrite": True, "shards": (16, 16, 16), "chunks": (4, 8, 8)}
        if strategy == "overwrite"
        else {"region": (slice(0, 32),) * 3, "write_strategy": strategy}
    )
    with dask.config.set(scheduler=scheduler), pytest.raises(RuntimeError, match="injected"):
        shardpipe.to_sharded_zarr(source, str(path), **kwargs)
    when_raised = _snapshot(path)
    time.sleep(1.0)
    assert _snapshot(path) == when_raised


@pytest.mark.parametrize("strategy", ["in_place", "append", "rewrite"])
def test_a_failed_update_leaves_old_or_new_shards_and_no_records(
    tmp_path: Path, strategy: str
) -> None:
    path = tmp_path / "a.zarr"
    data = uneven_volume((32, 32, 32))
    _write(path, data)
    new = uneven_volume((32, 32, 32), seed=4)
    source = da.from_array(new, chunks=(16, 16, 16)).map_blocks(_fail_in_one_block, dtype=new.dtype)
    with pytest.raises(RuntimeError, match="injected"):
        shardpipe.to_sharded_zarr(
            source, str(path), region=(slice(0, 32),) * 3, write_strategy=strategy
        )
    got = read_zarr(str(path))
    for z in (0, 16):
        for y in (0, 16):
            for x in (0, 16):
                box = np.s_[z : z + 16, y : y + 16, x : x + 16]
                assert (got[box] == data[box]).all() or (got[box] == new[box]).all()
    assert (got[16:, 16:, 16:] == data[16:, 16:, 16:]).all()
    check_volume(path, got)


def test_updates_that_cannot_fit_max_mem_are_refused_before_writing(tmp_path: Path) -> None:
    path = tmp_path / "a.zarr"
    data = uneven_volume((64, 64, 64))
    _write(path, data, shards=(64, 64, 64), chunks=(8, 8, 8))
    before = _snapshot(path)
    whole = (slice(0, 64),) * 3
    # the touched chunks of the shard (512 KiB raw) do not fit one task
    with pytest.raises(shardpipe.MemoryBudgetError, match="update-shard"):
        shardpipe.to_sharded_zarr(
            da.from_array(data, chunks=(16, 16, 16)), str(path), region=whole, max_mem="200KB"
        )
    # a rewrite holds the whole old shard (512 KiB raw)
    small = (slice(0, 8),) * 3
    with pytest.raises(shardpipe.MemoryBudgetError, match="whole old shard"):
        shardpipe.to_sharded_zarr(
            data[:8, :8, :8], str(path), region=small, write_strategy="rewrite", max_mem="300KB"
        )
    assert _snapshot(path) == before
    # auto appends instead, within the budget
    report = shardpipe.prepare_write(
        data[:8, :8, :8] + 1, str(path), region=small, max_mem="300KB", storage_options=NO_FSYNC
    ).execute()
    assert "rewrite" not in report.strategies
    data[:8, :8, :8] += 1
    check_volume(path, data)


def test_auto_does_not_go_in_place_where_the_undo_bytes_do_not_fit(tmp_path: Path) -> None:
    """In place keeps the old bytes it overwrites (its undo record): counted against max_mem."""
    path = tmp_path / "a.zarr"
    data = uneven_volume((64, 64, 64))
    # uncompressed: every new chunk fits its old room, so auto would go in place
    _write(path, data, shards=(64, 64, 64), chunks=(8, 8, 8), compressors=None)
    half = (slice(0, 32), slice(None), slice(None))
    before = _snapshot(path)
    # 256 KiB of chunks: ~516 KiB projected, ~773 KiB with the old bytes kept
    with pytest.raises(shardpipe.MemoryBudgetError, match="update-shard"):
        shardpipe.prepare_write(
            data[:32] + 1, str(path), region=half, max_mem="600KB", write_strategy="in_place"
        )
    assert _snapshot(path) == before
    report = shardpipe.prepare_write(
        data[:32] + 1, str(path), region=half, max_mem="600KB", storage_options=NO_FSYNC
    ).execute()
    assert report.strategies == {"append": 1}, report.strategies
    data[:32] += 1
    check_volume(path, data)
    # with room for the old bytes, auto goes in place
    report = shardpipe.prepare_write(
        data[:32] + 1, str(path), region=half, max_mem="1MB", storage_options=NO_FSYNC
    ).execute()
    assert report.strategies == {"in_place": 1}, report.strategies
    data[:32] += 1
    check_volume(path, data)


def test_a_memory_store_is_refused_when_worker_processes_would_write_it(
    cluster_client: Any,
) -> None:
    """Workers in other processes would write into copies of the store: data lost."""
    memory = zarr.storage.MemoryStore()
    data = da.from_array(np.ones((8, 8), "uint16"), chunks=(4, 8))
    with pytest.raises(InvalidArgumentError, match="worker processes") as info:
        shardpipe.to_sharded_zarr(data, memory, shards=(8, 8))
    assert info.value.parameter == "store"
    assert not list(memory._store_dict)
    with dask.config.set(scheduler="threads"):
        shardpipe.to_sharded_zarr(data, memory, shards=(8, 8))
    assert_same(np.asarray(zarr.open_array(memory, mode="r")[...]), np.ones((8, 8), "uint16"))


def test_repair_removes_shards_past_the_grid_an_interrupted_append_left(tmp_path) -> None:
    """An append killed after a shard of the grown array was published, before its zarr.json."""
    import shutil

    data = np.arange(40 * 6, dtype=np.int32).reshape(40, 6)
    shardpipe.to_sharded_zarr(data, str(tmp_path / "a"), shards=(10, 6), chunks=(5, 6))
    shardpipe.to_sharded_zarr(data, str(tmp_path / "b"), shards=(10, 6), chunks=(5, 6))
    zarr.open_array(str(tmp_path / "b"), mode="r+").resize((50, 6))
    zarr.open_array(str(tmp_path / "b"), mode="r+")[40:] = 7
    (tmp_path / "a" / "c" / "4").mkdir()
    shutil.copy(tmp_path / "b" / "c" / "4" / "0", tmp_path / "a" / "c" / "4" / "0")
    assert not shardpipe.verify(str(tmp_path / "a")).ok  # a key past the grid
    report = shardpipe.repair(str(tmp_path / "a"))
    assert report.removed_past_grid == 1 and "past the end of the grid" in str(report)
    assert report.ok
    assert not (tmp_path / "a" / "c" / "4" / "0").exists()
    assert (tmp_path / "a" / "c" / "3" / "0").exists()


def test_repair_after_a_failed_append_then_resume_writes_every_shard(tmp_path) -> None:
    """Repair removes the shards an unfinished append wrote past the grid; the append's
    records of them must go too, or its resume skips them and they read as fill value."""
    old = np.arange(1, 40 * 6 + 1, dtype=np.int32).reshape(40, 6)
    new = np.arange(1000, 1000 + 40 * 6, dtype=np.int32).reshape(40, 6)
    target = str(tmp_path / "a")
    shardpipe.to_sharded_zarr(old, target, shards=(10, 6), chunks=(5, 6))

    failing = [True]

    def block(block_info: Any = None) -> np.ndarray:
        (start, stop), _ = block_info[None]["array-location"]
        if start >= 30 and failing[0]:  # the last shard's block, once the others are written
            time.sleep(1.0)
            raise OSError("the source went away")
        return new[start:stop]

    # the same Dask name both times: the resumed append is the same update
    source = da.map_blocks(block, chunks=((10,) * 4, (6,)), dtype=new.dtype, name="new-rows")
    with dask.config.set(scheduler="threads"), pytest.raises(OSError, match="went away"):
        shardpipe.to_sharded_zarr(source, target, append_dim=0)
    assert (tmp_path / "a" / "c" / "4" / "0").exists()  # a shard past the grid, recorded done
    report = shardpipe.repair(target)
    assert report.removed_past_grid >= 1 and report.ok
    failing[0] = False
    shardpipe.to_sharded_zarr(source, target, append_dim=0, resume=True)
    assert_same(np.asarray(zarr.open_array(target, mode="r")[...]), np.concatenate([old, new]))


def test_a_failed_region_write_says_how_to_finish_it(tmp_path) -> None:
    """Interrupted or failed, a region write says what the array holds and how to go on."""
    target = str(tmp_path / "a")
    shardpipe.to_sharded_zarr(np.zeros((40, 6), np.int32), target, shards=(10, 6), chunks=(5, 6))

    def block(block_info: Any = None) -> np.ndarray:
        (start, stop), _ = block_info[None]["array-location"]
        if start >= 20:
            raise KeyboardInterrupt
        return np.ones((stop - start, 6), np.int32)

    source = da.map_blocks(block, chunks=((10,) * 4, (6,)), dtype=np.int32, name="patch")
    with dask.config.set(scheduler="synchronous"), pytest.raises(KeyboardInterrupt) as raised:
        shardpipe.to_sharded_zarr(source, target, region=(slice(0, 40), slice(None)))
    notes = "\n".join(getattr(raised.value, "__notes__", ()))
    assert "region write did not finish" in notes and "resume=True" in notes, notes
