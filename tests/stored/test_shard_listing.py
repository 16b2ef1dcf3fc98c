"""Listing the shards present: every chunk key encoding, what is no shard, bounded work."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

import shardpipe
from shardpipe.engine.shard_sweep import bounded_map, split
from shardpipe.storage.resolve import resolve_store
from shardpipe.stored.listing import Listed, list_shards, shard_prefix
from shardpipe.stored.metadata import format_of, layout_of, open_array_metadata

ENCODINGS = [
    {"name": "default", "separator": "/"},
    {"name": "default", "separator": "."},
    {"name": "v2", "separator": "."},
    {"name": "v2", "separator": "/"},
]


def _zarr_array(path: Path, encoding: dict[str, Any]) -> Any:
    """A (6, 6) array in shards of (2, 3), 4 of its 6 shards written (by zarr)."""
    array = zarr.create_array(
        str(path),
        shape=(6, 6),
        chunks=(1, 3),
        shards=(2, 3),
        dtype="uint8",
        chunk_key_encoding=encoding,
    )
    array[:4] = np.arange(1, 25, dtype="uint8").reshape(4, 6)
    return array


@pytest.mark.parametrize("encoding", ENCODINGS, ids=lambda e: f"{e['name']}{e['separator']}")
def test_every_chunk_key_encoding_lists_its_shards_and_its_strays(
    tmp_path: Path, encoding: dict[str, Any]
) -> None:
    array = _zarr_array(tmp_path / "a", encoding)
    target = resolve_store(str(tmp_path), "a")
    metadata = open_array_metadata(target)
    shard_format = format_of(metadata)
    records = tmp_path / "a/.shardpipe"
    records.mkdir()
    (records / "write.json").write_text("{}")  # shardpipe's records are not shards
    stray = array.metadata.encode_chunk_key((7, 0))  # past the grid's (3, 2)
    (tmp_path / "a" / stray).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "a" / stray).write_bytes(b"stray")
    listed = sorted(list_shards(target, shard_format, layout_of(metadata).shard_grid))
    shards = [(i, j) for i in (0, 1) for j in (0, 1)]
    assert listed == sorted(
        [Listed(f"a/{array.metadata.encode_chunk_key(c)}", c) for c in shards]
        + [Listed(f"a/{stray}", None, beyond=True)]
    )
    assert shard_prefix(target, shard_format).startswith("a/")
    report = shardpipe.verify(str(tmp_path), "a")
    assert (report.n_shards, report.shards_present) == (6, 4)
    assert [key for key, _ in report.problems] == [f"a/{stray}"]


def test_a_zero_dimensional_array_lists_its_one_shard(tmp_path: Path) -> None:
    array = zarr.create_array(str(tmp_path), shape=(), chunks=(), shards=(), dtype="u2")
    array[()] = 7
    report = shardpipe.verify(str(tmp_path))
    assert report.ok and (report.n_shards, report.shards_present) == (1, 1)
    assert [check.coords for check in report.shards] == [()]


def test_split_spreads_a_short_listing_and_caps_a_long_one() -> None:
    items = [Listed(f"c/{i}", (i,)) for i in range(10)]
    assert [len(t) for t in split(items, 4, 64)] == [3, 3, 3, 1]
    assert [len(t) for t in split(items, 1, 4)] == [4, 4, 2]
    assert split([], 4, 64) == []


def test_bounded_map_takes_items_only_as_fast_as_the_pool_works() -> None:
    taken = [0]
    running = [0, 0]  # now, most at once
    lock = threading.Lock()

    def items() -> Any:
        for i in range(40):
            taken[0] += 1
            yield i

    def work(i: int) -> int:
        with lock:
            running[0] += 1
            running[1] = max(running)
        time.sleep(0.002)
        with lock:
            running[0] -= 1
        return i * i

    results = bounded_map(work, items(), workers=2, window=4)
    first = next(results)
    assert taken[0] <= 5  # the window, and one more taken while waiting
    assert sorted([first, *results]) == [i * i for i in range(40)]
    assert running[1] <= 2


def test_bounded_map_raises_the_first_failure() -> None:
    def work(i: int) -> int:
        if i == 3:
            raise ValueError("three")
        return i

    with pytest.raises(ValueError, match="three"):
        list(bounded_map(work, range(100), workers=2))
