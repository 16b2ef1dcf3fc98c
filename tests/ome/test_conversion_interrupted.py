"""A conversion stopped part way: its error, ``verify`` and ``repair`` say to run it again
with ``overwrite=True`` (a conversion has no ``resume``), which completes it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import dask
import pytest
import zarr

import shardpipe
from shardpipe.errors import StorageFullError
from shardpipe.storage.local.store import LocalShardStore
from shardpipe.storage.resolve import ResolvedStore
from shardpipe.storage.retry import RetryingStore, RetryPolicy
from shardpipe.testing.faults import FaultyStore
from tests.support.writers_full_disk_child import same_tree, write_v04

RERUN = "run the same conversion again with overwrite=True"


@pytest.fixture(autouse=True)
def _threads() -> Iterator[None]:
    with dask.config.set(scheduler="threads"):
        yield


def test_an_interrupted_conversion_is_run_again_with_overwrite(tmp_path: Path) -> None:
    source, target, whole = tmp_path / "v04.zarr", tmp_path / "v05.zarr", tmp_path / "whole.zarr"
    write_v04(source)
    shardpipe.convert_ome_zarr(str(source), str(whole))
    faulty = FaultyStore(LocalShardStore(target), share=0.0, full_after=4)  # the record, 3 shards
    backend = RetryingStore(faulty, RetryPolicy(attempts=1), sleep=lambda s: None)
    full = ResolvedStore(zarr.storage.LocalStore(target, read_only=False), backend, "")
    with pytest.raises(StorageFullError) as caught:
        shardpipe.convert_ome_zarr(str(source), full)
    assert any(RERUN in note for note in caught.value.__notes__), caught.value.__notes__
    report = shardpipe.verify(str(target))
    assert any("unfinished conversion" in p and "overwrite=True" in p for _, p in report.problems)
    assert not any("resume" in p for _, p in report.problems), report.problems
    repaired = shardpipe.repair(str(target))  # it cannot finish a conversion: the record stays
    assert not repaired.ok
    assert any(RERUN in note for note in repaired.notes), repaired.notes
    assert not shardpipe.verify(str(target)).ok
    shardpipe.convert_ome_zarr(str(source), str(target), overwrite=True)
    assert same_tree(target, whole) is None
    assert shardpipe.verify(str(target), complete=True).ok
