"""``shardpipe.open_array``: one Dask block per shard (or boxes of shards), read by zarr-python.

Issue 32: there was no reader giving one Dask chunk per shard; ``da.from_zarr``
gives one per inner chunk. Compared against zarr-python's own reads, locally and
on S3 (the moto server).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import dask
import numpy as np
import pytest
import zarr

import shardpipe
from shardpipe.errors import InvalidArgumentError

DATA = np.arange(100 * 70 * 3, dtype="int32").reshape(100, 70, 3)


def _write(store: Any, **options: Any) -> None:
    shardpipe.to_sharded_zarr(DATA, store, shards=(32, 32, 3), chunks=(8, 8, 3), **options)


def _zarr_read(store: Any, storage_options: dict[str, Any] | None = None) -> np.ndarray:
    return np.asarray(zarr.open_array(store, mode="r", storage_options=storage_options)[:])


def test_one_block_per_shard(tmp_path: Path) -> None:
    _write(str(tmp_path))
    opened = shardpipe.open_array(str(tmp_path))
    assert opened.chunks == ((32, 32, 32, 4), (32, 32, 6), (3,))
    assert opened.npartitions == 4 * 3 == len(list((tmp_path / "c").rglob("*/*/*")))
    assert dask.array.from_zarr(str(tmp_path)).npartitions == 13 * 9  # one per inner chunk
    with dask.config.set(scheduler="sync"):
        np.testing.assert_array_equal(opened.compute(), _zarr_read(str(tmp_path)), strict=True)
        np.testing.assert_array_equal(opened[40:90, 5:66].compute(), DATA[40:90, 5:66])


def test_boxes_of_shards_within_max_mem(tmp_path: Path) -> None:
    _write(str(tmp_path))
    shard_nbytes = 32 * 32 * 3 * 4
    opened = shardpipe.open_array(tmp_path, max_mem=4 * shard_nbytes)
    assert opened.chunks == ((32, 32, 32, 4), (70,), (3,))  # a row of 3 shards per block
    for block in opened.to_delayed().ravel():
        assert math.prod(block.compute().shape) * 4 <= 4 * shard_nbytes
    np.testing.assert_array_equal(opened.compute(), DATA, strict=True)
    whole = shardpipe.open_array(tmp_path, max_mem="1GiB")
    assert whole.npartitions == 1
    np.testing.assert_array_equal(whole.compute(), DATA)


def test_a_path_in_a_group_and_unsharded_arrays(tmp_path: Path) -> None:
    _write(str(tmp_path), path="a/b")
    zarr.open_group(str(tmp_path), mode="a").create_array(
        "plain", data=np.arange(50, dtype="uint8"), chunks=(20,)
    )
    np.testing.assert_array_equal(shardpipe.open_array(tmp_path, "a/b").compute(), DATA)
    plain = shardpipe.open_array(tmp_path, path="plain")
    assert plain.chunks == ((20, 20, 10),)
    np.testing.assert_array_equal(plain.compute(), np.arange(50, dtype="uint8"))


def test_what_is_not_an_array_is_refused(tmp_path: Path) -> None:
    _write(str(tmp_path), path="a/b")
    with pytest.raises(InvalidArgumentError, match="is a group, not an array") as caught:
        shardpipe.open_array(tmp_path, "a")
    assert caught.value.parameter == "path" and "(b)" in str(caught.value)
    with pytest.raises(InvalidArgumentError, match="no Zarr array"):
        shardpipe.open_array(tmp_path, "nothing")
    with pytest.raises(InvalidArgumentError, match="max_mem") as caught:
        shardpipe.open_array(tmp_path, "a/b", max_mem=1000)
    assert "12,288 bytes" in str(caught.value)


@pytest.mark.s3
def test_on_s3(s3_bucket: tuple[str, dict[str, Any]]) -> None:
    bucket, options = s3_bucket
    url = f"s3://{bucket}/x.zarr"
    _write(url, storage_options=options)
    opened = shardpipe.open_array(url, storage_options=options)
    assert opened.chunks == ((32, 32, 32, 4), (32, 32, 6), (3,))
    with dask.config.set(scheduler="threads"):
        np.testing.assert_array_equal(opened.compute(), _zarr_read(url, options), strict=True)
    np.testing.assert_array_equal(opened.compute(), DATA)


def test_on_a_local_cluster(tmp_path: Path, cluster_client: Any) -> None:
    _write(str(tmp_path))
    opened = shardpipe.open_array(tmp_path)
    np.testing.assert_array_equal(cluster_client.compute(opened).result(), DATA)
