"""I/O errors in the middle of positioned writes: the shard goes back to its old bytes at once.

An update that changes shards in place (``in_place``, ``append`` on a file
system) writes an undo record first, then the shard's new bytes. Here a
device error (``EIO``, :class:`~shardpipe.testing.io_errors.DeviceErrorStore`)
stops each positioned write in turn, part way through its bytes. After the
error, before anything else runs: the shard it names is back to its old
bytes (the error says so), zarr-python reads the whole array and every shard
holds its old or its new data, ``verify`` is clean and a resumed update
finishes the job. When putting the old bytes back fails too (a bad sector),
the error names the shard left for ``repair``, every other shard still
reads, ``verify`` names that shard alone, and ``repair`` restores it.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Iterator
from pathlib import Path

import dask
import numpy as np
import pytest
import zarr

import shardpipe
from shardpipe.storage.local.store import LocalShardStore
from shardpipe.storage.resolve import ResolvedStore
from shardpipe.storage.retry import RetryingStore, RetryPolicy
from shardpipe.testing.io_errors import DeviceErrorStore
from shardpipe.write.prepare import prepare_write
from tests.support.readers import assert_same, read_zarr

SHAPE, SHARDS, CHUNKS = (32, 32, 32), (16, 16, 16), (8, 8, 8)
REGION = (slice(4, 28), slice(0, 32), slice(0, 32))  # partly covers every shard
N_SHARDS = 8


@pytest.fixture(autouse=True)
def _threads() -> Iterator[None]:
    with dask.config.set(scheduler="threads", num_workers=1):  # one shard at a time
        yield


def _old_and_new(path: Path) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    old = rng.integers(0, 2**16, SHAPE).astype("uint16")
    shardpipe.to_sharded_zarr(old, str(path), shards=SHARDS, chunks=CHUNKS)
    new = old.copy()
    new[REGION] = rng.integers(0, 2**16, new[REGION].shape).astype("uint16")
    return old, new


def _target(path: Path, store: DeviceErrorStore) -> ResolvedStore:
    fast = RetryPolicy(attempts=3, first_delay=0.001, max_delay=0.01)
    return ResolvedStore(zarr.storage.LocalStore(path), RetryingStore(store, fast), "")


def _shard_boxes() -> Iterator[tuple[str, tuple[slice, ...]]]:
    for index in np.ndindex(2, 2, 2):
        box = tuple(slice(c * s, (c + 1) * s) for c, s in zip(index, SHARDS, strict=True))
        yield "c/" + "/".join(map(str, index)), box


def _named(err: BaseException, what: str) -> list[str]:
    """Shards the notes of ``err`` say ``what`` of."""
    return [
        found[1]
        for note in getattr(err, "__notes__", [])
        if (found := re.match(rf"shardpipe: shard '([^']+)' {what}", note))
    ]


@pytest.mark.parametrize("strategy", ["in_place", "append"])
@pytest.mark.parametrize("failing", range(1, N_SHARDS + 1))
def test_an_io_error_in_a_positioned_write_rolls_the_shard_back(
    tmp_path: Path, strategy: str, failing: int
) -> None:
    old, new = _old_and_new(tmp_path)
    store = DeviceErrorStore(LocalShardStore(tmp_path), fail={failing})
    with pytest.raises(OSError) as caught:
        prepare_write(
            new[REGION], _target(tmp_path, store), region=REGION, write_strategy=strategy
        ).execute()
    err = caught.value
    assert err.errno == errno.EIO
    assert store.failed, "no positioned write failed"
    torn = store.failed[0]
    assert _named(err, "was rolled back to its old bytes") == [torn], err.__notes__
    got = read_zarr(str(tmp_path))  # the whole array reads, right after the error
    for key, box in _shard_boxes():
        assert (got[box] == old[box]).all() or (got[box] == new[box]).all(), key
    torn_box = dict(_shard_boxes())[torn]
    assert (got[torn_box] == old[torn_box]).all()
    assert shardpipe.verify(str(tmp_path)).ok
    assert not list((tmp_path / ".shardpipe").glob("undo/**/*"))
    shardpipe.to_sharded_zarr(new[REGION], str(tmp_path), region=REGION, resume=True)
    assert_same(read_zarr(str(tmp_path)), new)


@pytest.mark.parametrize("strategy", ["in_place", "append"])
def test_a_shard_that_cannot_be_rolled_back_is_named_for_repair(
    tmp_path: Path, strategy: str
) -> None:
    old, new = _old_and_new(tmp_path)
    store = DeviceErrorStore(LocalShardStore(tmp_path), fail={3}, sticky=True)
    with pytest.raises(OSError) as caught:
        prepare_write(
            new[REGION], _target(tmp_path, store), region=REGION, write_strategy=strategy
        ).execute()
    torn = store.failed[0]
    notes = "\n".join(caught.value.__notes__)
    assert _named(caught.value, "could not be rolled back") == [torn], notes
    assert "shardpipe repair" in notes
    array = zarr.open_array(str(tmp_path), mode="r")
    for key, box in _shard_boxes():  # every other shard reads, old or new
        if key != torn:
            got = np.asarray(array[box])
            assert (got == old[box]).all() or (got == new[box]).all(), key
    report = shardpipe.verify(str(tmp_path))
    assert not report.ok
    assert {key for key, _ in report.problems} == {torn}, report.problems  # that shard alone
    assert _records(tmp_path)  # its undo record is kept for repair
    store.heal()
    assert shardpipe.repair(str(tmp_path)).ok
    got = read_zarr(str(tmp_path))
    torn_box = dict(_shard_boxes())[torn]
    assert (got[torn_box] == old[torn_box]).all()


def _records(path: Path) -> list[str]:
    return [p.relative_to(path).as_posix() for p in path.glob(".shardpipe/undo/**/*")]
