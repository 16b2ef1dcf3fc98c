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
from shardpipe.verify import verify
from tests.readers import assert_same, read_tensorstore, read_zarr

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
