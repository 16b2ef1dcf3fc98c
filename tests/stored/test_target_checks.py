"""The check of a write's target: one listing for a new place, the right error otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest
import zarr

from shardpipe.errors import ArrayExistsError
from shardpipe.storage.local.store import LocalShardStore
from shardpipe.storage.resolve import ResolvedStore
from shardpipe.stored.places import check_target
from tests.support.spies import CountingStore


def _target(path: Path) -> tuple[ResolvedStore, CountingStore]:
    counting = CountingStore(LocalShardStore(path))
    return ResolvedStore(zarr.storage.LocalStore(path), counting, ""), counting


def test_a_new_place_costs_one_listing(tmp_path: Path) -> None:
    target, counting = _target(tmp_path)
    check_target(target, overwrite=False)
    assert counting.calls == ["list"]
    (tmp_path / ".shardpipe").mkdir()
    (tmp_path / ".shardpipe" / "write.json").write_text("{}")  # a record: shardpipe's own
    check_target(target, overwrite=False)


def test_an_array_is_named_as_such_whatever_else_is_there(tmp_path: Path) -> None:
    zarr.create_array(tmp_path, shape=(4,), dtype="uint8")[:] = 1  # zarr.json and c/0
    (tmp_path / "notes.txt").write_text("mine")
    target, _ = _target(tmp_path)
    with pytest.raises(ArrayExistsError, match="already exists"):
        check_target(target, overwrite=False)


def test_other_files_make_a_place_not_empty(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    target, counting = _target(tmp_path)
    with pytest.raises(ArrayExistsError, match=r"is not empty: it holds 'notes\.txt'"):
        check_target(target, overwrite=False)
    assert counting.calls == ["list", "size"]  # zarr.json looked up once something was found
