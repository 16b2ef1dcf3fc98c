"""The same writes on a distributed.LocalCluster with worker processes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np
import pytest
from zarr.codecs import ZstdCodec

import shardpipe
from shardpipe.maintenance.verification import verify
from tests.support.readers import assert_same, read_tensorstore, read_zarr

pytestmark = pytest.mark.cluster


def _data() -> np.ndarray:
    rng = np.random.default_rng(3)
    values = rng.normal(size=(70, 90, 40)).astype("float32")
    values[:30] = np.nan
    return values


@pytest.mark.parametrize(
    ("dask_chunks", "index_location", "max_mem"),
    [
        ((32, 32, 40), "end", "64MB"),  # aligned: blocks hold whole shards
        ((25, 19, 13), "start", "64MB"),  # misaligned: pieces travel between workers
        (((10, 50, 10), (1, 89), (40,)), "end", "64MB"),  # irregular
        ((16, 32, 40), "start", 200_000),  # shards written in parts and stamped
        ((16, 32, 40), "end", 200_000),  # parts placed by each worker process, then joined
    ],
)
def test_cluster_round_trip(
    cluster_client: Any, tmp_path: Path, dask_chunks: Any, index_location: str, max_mem: Any
) -> None:
    data = _data()
    assert dask.base.get_scheduler() == cluster_client.get  # writes run on the worker processes
    shardpipe.to_sharded_zarr(
        da.from_array(data, chunks=dask_chunks),
        str(tmp_path),
        shards=(32, 32, 40),
        chunks=(16, 8, 8),
        compressors=ZstdCodec(level=1),
        fill_value=np.nan,
        index_location=index_location,
        max_mem=max_mem,
    )
    assert_same(read_zarr(str(tmp_path)), data)
    assert_same(read_tensorstore(str(tmp_path)), data)
    assert verify(str(tmp_path)).ok
    assert not (tmp_path / ".shardpipe/staging").exists()


@pytest.mark.parametrize(
    ("dask_chunks", "derived", "max_mem"),
    [
        ((32, 32, 40), False, "64MB"),  # blocks are shards: each block a future as it is
        ((25, 19, 13), False, "64MB"),  # misaligned: a future feeds several tasks
        ((32, 32, 40), True, "64MB"),  # computed from the futures
        ((16, 32, 40), False, 200_000),  # in parts, in several waves
    ],
)
def test_cluster_writes_a_persisted_array(
    cluster_client: Any, tmp_path: Path, dask_chunks: Any, derived: bool, max_mem: Any
) -> None:
    """``client.persist(x)`` then a write: the blocks are the cluster's futures.

    Dask's optimisation of the source's graph drops futures; the write took none of
    the blocks (a ``KeyError`` naming the first) before they were kept as they are.
    """
    data = _data()
    held = cluster_client.persist(da.from_array(data, chunks=dask_chunks))
    source = held * 2 if derived else held
    shardpipe.to_sharded_zarr(
        source, str(tmp_path), shards=(32, 32, 40), chunks=(16, 8, 8), max_mem=max_mem
    )
    assert_same(read_zarr(str(tmp_path)), data * 2 if derived else data)
    assert verify(str(tmp_path)).ok


def test_cluster_delayed_write_keeps_the_futures_it_reads(
    cluster_client: Any, tmp_path: Path
) -> None:
    """A ``compute=False`` write of an array computed from persisted blocks holds them.

    The persisted array is gone by the time the write runs: only the write's graph
    keeps the cluster from releasing its blocks.
    """
    import gc

    data = _data()
    held = cluster_client.persist(da.from_array(data, chunks=(32, 32, 40)))
    delayed_write = shardpipe.to_sharded_zarr(
        held * 2, str(tmp_path), shards=(32, 32, 40), chunks=(16, 8, 8), compute=False
    )
    del held
    gc.collect()
    delayed_write.compute()
    assert_same(read_zarr(str(tmp_path)), data * 2)


def test_cluster_task_names_read_well(cluster_client: Any, tmp_path: Path) -> None:
    data = da.from_array(_data(), chunks=(16, 32, 40))
    delayed = shardpipe.to_sharded_zarr(
        data, str(tmp_path), shards=(32, 32, 40), chunks=(16, 8, 8), max_mem=200_000, compute=False
    )
    report = cluster_client.compute(delayed).result()
    assert report.shards == 3 * 3
    prefixes = {str(k[0] if isinstance(k, tuple) else k).rsplit("-", 1)[0] for k in delayed.dask}
    assert {"begin-shard", "write-part", "stamp-shard", "write-done"} <= prefixes
    assert_same(read_zarr(str(tmp_path)), _data())


def _incoming(dask_worker: Any) -> list[tuple[str, int]]:
    return [
        (str(key), int(entry["total"]))
        for entry in dask_worker.transfer_incoming_log
        for key in entry["keys"]
    ]


def _ran(dask_scheduler: Any, prefix: str) -> int:
    found = dask_scheduler.task_prefixes.get(prefix)
    return 0 if found is None else sum(found.state_counts.values())


def _block(block_info: Any = None) -> np.ndarray:
    (z0, z1), (y0, y1), (x0, x1) = block_info[None]["array-location"]
    return np.add.outer(np.arange(z0, z1), np.arange(y0, y1))[:, :, None] + np.arange(x0, x1)


def test_cluster_blocks_are_computed_where_they_are_written(
    cluster_client: Any, tmp_path: Path
) -> None:
    """Aligned blocks: each is computed inside its write-shard task, so none travels."""
    blocks = (32, 32, 40)
    source = da.map_blocks(
        _block,
        chunks=((32, 32), (32, 32), (40,)),
        dtype="int64",
        name="shardpipe-test-source-0123abcd",
        meta=np.empty(0),
    )
    before = cluster_client.run(_incoming)
    shardpipe.to_sharded_zarr(source, str(tmp_path), shards=blocks, chunks=(16, 16, 20))
    after = cluster_client.run(_incoming)
    # the scheduler never saw a task of the source: blocks live only inside write-shard tasks
    assert cluster_client.run_on_scheduler(_ran, prefix="shardpipe-test-source") == 0
    assert cluster_client.run_on_scheduler(_ran, prefix="write-shard") >= 4
    # and what moved between workers is the write target at most, no block
    moved = [entry for w in after for entry in after[w][len(before[w]) :]]
    assert sum(nbytes for _, nbytes in moved) < 32 * 32 * 40 * 8, moved
    expected = np.add.outer(np.arange(64), np.arange(64))[:, :, None] + np.arange(40)
    assert_same(read_zarr(str(tmp_path)), expected)


def test_cluster_small_shards_are_written_several_per_task(
    cluster_client: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """64 shards of 16 KiB on 2 threads: 16 tasks of 4 shards, each shard counted."""
    values = np.arange(64 * 32 * 64, dtype="int32").reshape(64, 32, 64)
    job = shardpipe.prepare_write(
        da.from_array(values, chunks=(4, 8, 64)) * 2,
        str(tmp_path),
        shards=(4, 8, 64),
        chunks=(4, 8, 16),
    )
    report = job.execute(progress=True)
    assert (report.shards, report.chunks_stored) == (64, 64 * 4)
    assert "64/64" in capsys.readouterr().err
    assert cluster_client.run_on_scheduler(_ran, prefix="write-shards") >= 16
    assert_same(read_zarr(str(tmp_path)), values * 2)
    assert verify(str(tmp_path)).ok


def _fail_at_block_5(block: np.ndarray, block_info: Any = None) -> np.ndarray:
    if block_info[0]["chunk-location"][0] == 5:
        raise ValueError("block 5 cannot be computed")
    return block


def test_cluster_failure_inside_a_group_of_shards(cluster_client: Any, tmp_path: Path) -> None:
    """A block computed inside a group task fails: the write fails, what it published is whole."""
    values = np.arange(64 * 32 * 64, dtype="int32").reshape(64, 32, 64)
    source = da.from_array(values, chunks=(4, 8, 64)).map_blocks(_fail_at_block_5, dtype="int32")
    with pytest.raises(ValueError, match="block 5 cannot be computed"):
        shardpipe.to_sharded_zarr(source, str(tmp_path), shards=(4, 8, 64), chunks=(4, 8, 16))
    assert verify(str(tmp_path)).ok
    assert not list((tmp_path / ".shardpipe/staging").glob("*"))
    assert cluster_client.run_on_scheduler(_ran, prefix="write-shards") > 0
