"""The cost model chooses the way a rechunk runs: one pass, smaller blocks, or two passes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dask.array as da
import fsspec
import numpy as np
import pytest
import zarr

import shardpipe
from shardpipe.core.source_blocks import ReadCost
from shardpipe.rechunking.intermediate import Intermediate
from tests.support.readers import assert_same, read_tensorstore, read_zarr

LAYOUT = {"shards": (32, 64, 64), "chunks": (32, 32, 32)}


def _slabs(path: Path) -> np.ndarray:
    data = np.random.default_rng(3).integers(1, 4000, (32, 128, 256)).astype("uint16")
    array = zarr.create_array(path, shape=data.shape, chunks=(1, 128, 256), dtype="uint16")
    array[...] = data
    return data


@pytest.mark.parametrize(
    ("max_mem", "kind", "passes"),
    [("2MB", "one pass, smaller blocks", 1), ("1500KB", "two passes", 2), ("8MB", "one pass", 1)],
)
def test_the_plan_runs_the_way_the_model_chooses(
    tmp_path: Path, max_mem: str, kind: str, passes: int
) -> None:
    data = _slabs(tmp_path / "src.zarr")
    target = tmp_path / "out.zarr"
    job = shardpipe.plan_rechunk(tmp_path / "src.zarr", target, max_mem=max_mem, **LAYOUT)
    assert job.weighed is not None and job.weighed.chosen.kind == kind
    assert len(job.passes()) == passes
    shown = repr(job)
    assert f"model's choice: {kind}" in shown and "this plan runs" not in shown
    if kind == "one pass, smaller blocks":  # each slab read by two blocks of half its rows
        assert job.block_shape == job.weighed.chosen.block_shape
        assert job.cost.amplification == 2.0
    if kind == "two passes":  # the copy runs in the blocks and chunks the model weighed
        assert job.intermediate is not None
        assert job.intermediate.block_shape == job.weighed.chosen.block_shape
        assert job.intermediate.chunk_shape == job.weighed.chosen.intermediate_chunks
        assert job.block_shape == job.weighed.chosen.second_blocks
    report = job.execute()
    assert_same(read_zarr(str(target)), data)
    assert_same(read_tensorstore(str(target)), data)
    assert (report.intermediate_nbytes > 0) == (passes == 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.zarr", "src.zarr"]


@pytest.mark.parametrize(
    ("max_mem", "chosen", "temp_store", "copy"),
    [
        ("1MB", "two passes", False, ((8, 64, 128), (8, 16, 32))),
        # a copy that temp_store asks for runs as the model weighed it, though not chosen
        ("8MB", "one pass", True, ((73, 64, 128), (73, 32, 32))),
    ],
)
def test_a_time_series_copies_in_the_blocks_and_chunks_the_model_weighed(
    tmp_path: Path, max_mem: str, chosen: str, temp_store: bool, copy: tuple[Any, Any]
) -> None:
    """Pass 2 reads every time step: the copy's chunks need only divide pass 1's blocks.

    They were cut to what the blocks share with the 146 steps, (2, 16, 32) of 4 KiB,
    and the model, pricing those requests, rated two passes dearer than they run.
    """
    data = np.random.default_rng(5).normal(size=(146, 64, 128)).astype("float32")
    source = zarr.create_array(
        tmp_path / "src.zarr", shape=data.shape, chunks=(1, 64, 128), dtype="float32"
    )
    source[...] = data
    target = tmp_path / "out.zarr"
    layout: dict[str, Any] = {"shards": (146, 32, 32), "chunks": (146, 8, 8)}
    if temp_store:
        layout["temp_store"] = str(tmp_path / "scratch.zarr")
    job = shardpipe.plan_rechunk(tmp_path / "src.zarr", target, max_mem=max_mem, **layout)
    assert job.weighed is not None and job.weighed.chosen.kind == chosen
    (weighed,) = [c for c in job.weighed.candidates if c.kind == "two passes"]
    assert job.intermediate is not None
    assert (job.intermediate.block_shape, job.intermediate.chunk_shape) == copy
    assert (weighed.block_shape, weighed.intermediate_chunks) == copy
    assert job.block_shape == weighed.second_blocks
    job.execute()
    assert_same(read_zarr(str(target)), data)
    assert_same(read_tensorstore(str(target)), data)


@pytest.mark.parametrize(
    ("shards", "max_mem", "chosen"),
    [
        # temp_store makes a plan whose blocks cut inner chunks copy, whatever was chosen
        ((730, 128, 128), "1GB", "one pass"),
        # pass 2 in blocks of an eighth of the array at most, as weighed
        ((730, 256, 512), "256MiB", "two passes"),
    ],
)
def test_a_copy_runs_as_the_model_weighed_it(
    tmp_path: Path, shards: tuple[int, ...], max_mem: str, chosen: str
) -> None:
    """The copy runs in the blocks and chunks, and pass 2 in the blocks, of the two
    passes the model weighed."""
    source = tmp_path / "src.zarr"  # planned, never read: no chunk need be written
    zarr.create_array(source, shape=(730, 256, 512), chunks=(1, 256, 512), dtype="float32")
    job = shardpipe.plan_rechunk(
        source,
        tmp_path / "out.zarr",
        shards=shards,
        chunks=(730, 32, 32),
        max_mem=max_mem,
        temp_store=str(tmp_path / "scratch.zarr"),
    )
    assert job.weighed is not None and job.weighed.chosen.kind == chosen
    (weighed,) = [c for c in job.weighed.candidates if c.kind == "two passes"]
    assert job.intermediate is not None
    assert job.intermediate.block_shape == weighed.block_shape == (64, 256, 512)
    assert job.intermediate.chunk_shape == weighed.intermediate_chunks == (64, 128, 128)
    assert job.block_shape == weighed.second_blocks == (730, 128, 128)


def test_a_dask_source_keeps_its_blocks(tmp_path: Path) -> None:
    """A Dask array is read as it is blocked, whatever the model would choose."""
    data = np.arange(32 * 128 * 256, dtype="uint16").reshape(32, 128, 256)
    source = da.from_array(data, chunks=(1, 128, 256))
    job = shardpipe.plan_rechunk(source, tmp_path / "out.zarr", max_mem="2MB", **LAYOUT)
    assert job.block_shape == (1, 128, 256)
    job.execute()
    assert_same(read_zarr(str(tmp_path / "out.zarr")), data)


@pytest.mark.parametrize(
    ("place", "stored"),
    [("copy.zarr", None), ("file:///{tmp}/copy.zarr", None), ("s3://bucket/copy.zarr", "zstd")],
)
def test_a_copy_on_a_local_disk_is_uncompressed(tmp_path: Path, place: str, stored: str) -> None:
    where = place.format(tmp=str(tmp_path).lstrip("/"))
    if "://" not in where:
        where = str(tmp_path / where)
    copy = Intermediate(where, None, (4, 64, 64), (4, 128, 256), ReadCost(1, 1, 1))
    names = [codec.to_dict()["name"] for codec in copy.compressors or ()]
    assert names == ([] if stored is None else [stored])
    assert ("(uncompressed)" if stored is None else "(zstd)") in copy.describe()


def test_the_local_copy_is_written_uncompressed(tmp_path: Path) -> None:
    blocks = da.from_array(np.arange(8 * 128 * 256, dtype="uint16").reshape(8, 128, 256))
    copy = Intermediate(
        str(tmp_path / "copy.zarr"), None, (4, 64, 64), (4, 128, 256), ReadCost(1, 1, 1)
    )
    written, _ = copy.write(blocks.rechunk((4, 128, 256)), 0)
    codecs = json.loads((tmp_path / "copy.zarr" / "zarr.json").read_text())["codecs"]
    assert [c["name"] for c in codecs] == ["bytes"]
    assert_same(np.asarray(written[...]), np.asarray(blocks))


@pytest.mark.s3
def test_two_passes_into_s3_keep_a_zstd_copy_beside_the_target(
    tmp_path: Path, s3_bucket: tuple[str, dict[str, Any]]
) -> None:
    """On an object store the copy's bytes are the cost: zstd, through zarr-python (and the
    model, counting it encoded and decoded, prefers one pass in smaller blocks here)."""
    bucket, options = s3_bucket
    data = _slabs(tmp_path / "src.zarr")
    target, scratch = f"s3://{bucket}/two-pass.zarr", f"s3://{bucket}/scratch.zarr"
    planned = shardpipe.plan_rechunk(
        tmp_path / "src.zarr", target, max_mem="1500KB", storage_options=options, **LAYOUT
    )
    assert planned.weighed is not None
    assert planned.weighed.chosen.kind == "one pass, smaller blocks" and not planned.intermediate
    job = shardpipe.plan_rechunk(
        tmp_path / "src.zarr",
        target,
        max_mem="1500KB",
        storage_options=options,
        temp_store=scratch,
        **LAYOUT,
    )
    assert job.intermediate is not None and job.intermediate.store == scratch
    assert job.intermediate.compressors and "(zstd)" in repr(job)
    report = job.execute()
    assert report.intermediate_nbytes > 0
    assert_same(np.asarray(zarr.open_array(target, mode="r", storage_options=options)[...]), data)
    fs = fsspec.filesystem("s3", **options)
    assert [p for p in fs.ls(bucket) if "scratch" in p] == []  # the copy is gone


def test_a_plan_says_when_it_reads_in_other_blocks_than_the_model_weighed(
    tmp_path: Path,
) -> None:
    """One pass in the largest blocks whose write plan fits: the plan says so (trial note)."""
    _slabs(tmp_path / "src.zarr")
    job = shardpipe.plan_rechunk(
        tmp_path / "src.zarr", tmp_path / "out.zarr", max_mem="4MB", **LAYOUT
    )
    assert job.weighed is not None and job.weighed.chosen.kind == "one pass"
    assert job.block_shape != job.weighed.chosen.block_shape
    (said,) = [value for label, value in job.summary_rows() if label == "model's choice"]
    assert f"this plan reads in blocks of {job.block_shape}, the largest" in said, said
