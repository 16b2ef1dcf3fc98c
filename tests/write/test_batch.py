"""Batches of region writes (``write_regions``, ``RegionBatch``), read back by two readers."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

import shardpipe
from shardpipe.errors import InvalidArgumentError, JobConflictError, MemoryBudgetError
from tests.support.readers import assert_same, read_zarr
from tests.support.volumes import NO_FSYNC, check_volume, uneven_volume, write_volume

STRATEGIES = ["auto", "in_place", "append", "rewrite"]
SHAPE = (37, 30, 32)  # edge shards and edge chunks along the first two axes


def _random_pairs(seed: int, count: int) -> list[tuple[tuple[slice, ...], np.ndarray]]:
    rng = np.random.default_rng(seed)
    pairs = []
    for k in range(count):
        region = []
        for n in SHAPE:
            a, b = sorted(int(x) for x in rng.integers(0, n + 1, 2))
            region.append(slice(a, max(b, a + 1)) if a < n else slice(n - 1, n))
        shape = tuple(s.stop - s.start for s in region)
        pairs.append((tuple(region), uneven_volume(shape, seed=seed * 100 + k)))
    return pairs


def _files(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in path.rglob("*") if p.is_file()}


@pytest.mark.parametrize("index_location", ["end", "start"])
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("compressed", [True, False], ids=["zstd", "raw"])
def test_a_batch_equals_its_pairs_written_in_order(
    tmp_path: Path, index_location: str, strategy: str, compressed: bool
) -> None:
    path = tmp_path / "a.zarr"
    data = uneven_volume(SHAPE)
    compressors: Any = "auto" if compressed else None
    write_volume(path, data, index_location=index_location, compressors=compressors)
    for seed in range(3):
        pairs = _random_pairs(seed, 12)  # overlapping boxes, many sharing shards
        report = shardpipe.write_regions(
            pairs, str(path), write_strategy=strategy, storage_options=NO_FSYNC
        )
        for region, values in pairs:
            data[region] = values  # later pairs win
        check_volume(path, data)
        assert report.shards == report.shards_empty + sum(report.strategies.values())


def test_each_shard_is_changed_once_by_one_writer(tmp_path: Path) -> None:
    path = tmp_path / "a.zarr"
    data = uneven_volume((32, 32, 32))
    write_volume(path, data)
    # six pairs in shard (0, 0, 0), two in shard (1, 1, 1): two shards rewritten, once each
    pairs = [
        ((slice(i, i + 2), slice(0, 4), slice(0, 8)), uneven_volume((2, 4, 8), seed=i))
        for i in range(0, 12, 2)
    ]
    pairs += [
        ((slice(20, 24), slice(16, 24), slice(16, 24)), uneven_volume((4, 8, 8), seed=50)),
        ((slice(30, 32), slice(30, 32), slice(30, 32)), uneven_volume((2, 2, 2), seed=51)),
    ]
    report = shardpipe.write_regions(pairs, str(path), write_strategy="rewrite")
    assert report.shards == 2 and report.strategies == {"rewrite": 2}
    for region, values in pairs:
        data[region] = values
    check_volume(path, data)


def test_overlapping_regions_later_wins(tmp_path: Path) -> None:
    path = tmp_path / "a.zarr"
    data = np.zeros((16, 16), dtype="int32")
    write_volume(path, data, shards=(8, 8), chunks=(4, 4))
    whole = np.full((16, 16), 1, dtype="int32")
    part = np.full((3, 5), 2, dtype="int32")
    shardpipe.write_regions(
        [((slice(None), slice(None)), whole), ((slice(2, 5), slice(-6, -1)), part)], str(path)
    )
    data[:] = 1
    data[2:5, 10:15] = 2
    check_volume(path, data)
    shardpipe.write_regions(
        [((slice(2, 5), slice(10, 15)), part), ((slice(0, 16), slice(0, 16)), whole)], str(path)
    )
    check_volume(path, np.ones((16, 16), dtype="int32"))


def test_fill_value_and_absent_chunks(tmp_path: Path) -> None:
    path = tmp_path / "a.zarr"
    data = np.zeros((20, 20), dtype="float32")
    write_volume(path, data, shards=(8, 8), chunks=(4, 4), fill_value=0.0)
    assert not list((path / "c").rglob("*"))  # nothing stored: every chunk is the fill value
    one = np.full((2, 5), 5.0, dtype="float32")
    report = shardpipe.write_regions([((slice(17, 19), slice(1, 6)), one)], str(path))
    data[17:19, 1:6] = 5.0
    check_volume(path, data)
    assert report.strategies == {"new": 1}
    # writing the fill value back drops the chunk again
    shardpipe.write_regions(
        [((slice(16, 20), slice(0, 4)), np.zeros((4, 4), "float32"))], str(path)
    )
    data[16:20, 0:4] = 0.0
    check_volume(path, data)
    assert shardpipe.info(str(path)).chunks_stored == 1  # chunk (4, 1) still holds 5s


def test_region_batch_applies_on_exit(tmp_path: Path) -> None:
    path = tmp_path / "a.zarr"
    data = uneven_volume(SHAPE)
    write_volume(path, data)
    buffer = np.empty((4, 8, 8), dtype="uint16")
    with shardpipe.RegionBatch(str(path), storage_options=NO_FSYNC) as batch:
        for k in range(5):
            buffer[...] = k + 7  # the batch keeps a copy: reusing the buffer is safe
            batch[4 * k : 4 * k + 4, 8:16, 0:8] = buffer
            data[4 * k : 4 * k + 4, 8:16, 0:8] = k + 7
        assert len(batch) == 5
        assert_same(read_zarr(str(path))[0:4, 8:16, 0:8], uneven_volume(SHAPE)[0:4, 8:16, 0:8])
    assert batch.report is not None and batch.report.shards == 2
    check_volume(path, data)
    with pytest.raises(InvalidArgumentError, match="applied already"):
        batch[0:1, 0:1, 0:1] = np.zeros((1, 1, 1), "uint16")


def test_region_batch_writes_nothing_when_the_block_raises(tmp_path: Path) -> None:
    path = tmp_path / "a.zarr"
    write_volume(path, uneven_volume(SHAPE))
    before = _files(path)
    with pytest.raises(RuntimeError, match="stop"), shardpipe.RegionBatch(str(path)) as batch:
        batch[0:4, 0:8, 0:8] = np.ones((4, 8, 8), dtype="uint16")
        raise RuntimeError("stop")
    assert batch.report is None
    assert _files(path) == before


@pytest.mark.parametrize(
    ("updates", "parameter", "words"),
    [
        ("not a list", "updates", "list of (region, data) pairs"),
        ([np.zeros((4, 8, 8), "uint16")], "updates", "not a (region, data) pair"),
        ([((slice(0, 4), slice(0, 8)), np.zeros((4, 8), "uint16"))], "updates[0]", "dimension"),
        (
            [((slice(0, 4), slice(0, 8), slice(30, 38)), np.zeros((4, 8, 8), "uint16"))],
            "updates[0]",
            "outside the array",
        ),
        (
            [((slice(0, 4), slice(0, 8), slice(0, 8)), np.zeros((4, 8, 7), "uint16"))],
            "updates[0]",
            "holds 8 element",
        ),
        (
            [((slice(0, 4), slice(0, 8), slice(0, 8)), np.full((4, 8, 8), -1, "int16"))],
            "updates[0]",
            "int16 value -1 does not fit the array's dtype uint16",
        ),
        ([((0, 1, 2), np.zeros((1, 1, 1), "uint16"))], "updates[0]", "tuple of slices"),
        ([((slice(0, 1),) * 3, "data")], "updates[0]", "not an array"),
    ],
)
def test_bad_updates_are_refused_before_anything_is_written(
    tmp_path: Path, updates: Any, parameter: str, words: str
) -> None:
    path = tmp_path / "a.zarr"
    write_volume(path, uneven_volume(SHAPE))
    before = _files(path)
    good = ((slice(0, 4), slice(0, 8), slice(0, 8)), np.ones((4, 8, 8), "uint16"))
    pairs = updates if isinstance(updates, str) else [good, *updates]
    if not isinstance(updates, str):  # the bad pair is second: name it so
        parameter = parameter.replace("[0]", "[1]")
    with pytest.raises(InvalidArgumentError, match=re.escape(words)) as caught:
        shardpipe.write_regions(pairs, str(path))
    assert caught.value.parameter == parameter
    assert _files(path) == before


def test_bad_arguments_and_assignments_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "a.zarr"
    write_volume(path, uneven_volume(SHAPE))
    before = _files(path)
    with pytest.raises(InvalidArgumentError, match="unknown value") as caught:
        shardpipe.write_regions([], str(path), write_strategy="sideways")
    assert caught.value.parameter == "write_strategy"
    with pytest.raises(InvalidArgumentError, match="no Zarr v3 array"):
        shardpipe.RegionBatch(str(tmp_path / "missing.zarr"))
    with pytest.raises(MemoryBudgetError):
        shardpipe.write_regions([], str(path), write_strategy="rewrite", max_mem=1000)
    with shardpipe.RegionBatch(str(path)) as batch:
        with pytest.raises(InvalidArgumentError, match="outside the array") as caught:
            batch[0:4, 0:8, 30:38] = np.zeros((4, 8, 8), "uint16")
        assert caught.value.parameter == "batch[region]"
        with pytest.raises(InvalidArgumentError, match="dtype") as caught:
            batch[0:4, 0:8, 0:8] = np.zeros((4, 8, 8), "float64")
        assert caught.value.parameter == "batch[region] = value"
    assert batch.report is not None and batch.report.shards == 0
    assert _files(path) == before


def test_an_empty_batch_takes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "a.zarr"
    write_volume(path, uneven_volume(SHAPE))
    before = _files(path)
    report = shardpipe.write_regions(
        [((slice(3, 3), slice(None), slice(None)), np.zeros((0, 30, 32), "uint16"))], str(path)
    )
    assert report.shards == 0
    assert _files(path) == before


def test_chunks_encoded_at_once_fit_max_mem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # each chunk encoded beside the first holds one more working set: the batch's
    # window is what max_mem leaves beside a whole-shard rewrite, as a planned write's
    import shardpipe.engine.batch_tasks as batch_tasks
    import shardpipe.write.batch as batch_module
    from shardpipe.codec.chunk_codec import ChunkCodec
    from shardpipe.storage.resolve import resolve_store
    from shardpipe.write.planning import memory_model

    path = tmp_path / "a.zarr"
    write_volume(path, uneven_volume(SHAPE))
    monkeypatch.setattr(batch_module, "CPU_COUNT", 8)
    windows: list[int] = []
    encode_in_order = batch_tasks.encode_in_order

    def spy(encode: Any, jobs: Any, most: int) -> Any:
        windows.append(most)
        return encode_in_order(encode, jobs, most)

    monkeypatch.setattr(batch_tasks, "encode_in_order", spy)
    codec = ChunkCodec.from_metadata(zarr.open_array(str(path)).metadata)
    model = memory_model(codec, (4, 8, 8), resolve_store(str(path), None, None).shards)
    rewrite = 2 * model.encoded(16 * 16 * 16 * 2)
    region = (slice(0, 4), slice(0, 8), slice(0, 8))
    for budget, most in [
        (rewrite, 1),
        (rewrite + model.working, 2),
        (rewrite + 3 * model.working + 1, 4),
        (rewrite + 100 * model.working, 8),
    ]:
        windows.clear()
        shardpipe.write_regions(
            [(region, uneven_volume((4, 8, 8), seed=budget))], str(path), max_mem=budget
        )
        assert windows == [most], budget


def test_a_batch_of_an_array_that_changed_since_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "a.zarr"
    data = uneven_volume(SHAPE)
    write_volume(path, data)
    changed = pytest.raises(JobConflictError, match=r"zarr\.json changed since the batch")
    with changed, shardpipe.RegionBatch(str(path), storage_options=NO_FSYNC) as batch:
        batch[0:4, 0:8, 0:8] = np.ones((4, 8, 8), "uint16")
        zarr.open_array(str(path)).attrs["changed"] = True  # another writer, meanwhile
        before = _files(path)
    assert _files(path) == before  # not a byte, and the marker let go
    check_volume(path, data)
