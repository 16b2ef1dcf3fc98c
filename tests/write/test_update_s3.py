"""Updates on S3 (moto's server on 127.0.0.1 through s3fs): server-side compose and rewrite."""

from __future__ import annotations

from typing import Any

import boto3
import dask
import dask.array as da
import numpy as np
import pytest

import shardpipe
from tests.support.readers import assert_same
from tests.write.test_s3_write import _leftovers, _read_tensorstore, _read_zarr


@pytest.fixture(autouse=True)
def _threads() -> Any:
    """NumPy sources: run in this process (a cluster would get them inside the graph)."""
    with dask.config.set(scheduler="threads"):
        yield


def _objects(bucket: str, storage_options: dict[str, Any]) -> dict[str, str]:
    kw = storage_options["client_kwargs"]
    client = boto3.client("s3", endpoint_url=kw["endpoint_url"], region_name=kw["region_name"])
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return {o["Key"]: o["ETag"] for page in pages for o in page.get("Contents", [])}


@pytest.mark.parametrize("index_location", ["end", "start"])
def test_append_composes_large_shards_server_side(
    s3_bucket: tuple[str, dict[str, Any]], index_location: str
) -> None:
    """Shards of 12 MiB: the kept bytes are copied by the server (UploadPartCopy)."""
    bucket, options = s3_bucket
    url = f"s3://{bucket}/big.zarr"
    rng = np.random.default_rng(0)
    data = rng.integers(0, 255, (256, 256, 192), dtype="uint8")
    shardpipe.to_sharded_zarr(
        da.from_array(data, chunks=(128, 256, 192)),
        url,
        shards=(256, 256, 192),
        chunks=(32, 32, 32),
        compressors=None,
        index_location=index_location,
        storage_options=options,
    )
    for step, region in enumerate(
        [np.s_[0:32, 0:32, 0:32], np.s_[40:90, 100:130, 7:33], np.s_[255:256, 0:256, 0:192]]
    ):
        new = rng.integers(0, 255, data[region].shape, dtype="uint8")
        report = shardpipe.prepare_write(
            da.from_array(new, chunks=(16, 64, 64)),
            url,
            region=region,
            storage_options=options,
        ).execute()
        data[region] = new
        assert report.strategies == {"append": 1}, (step, report)
        # the client sent the new chunks (at most 1.5 MiB) and the index, not the
        # 12 MiB shard; with the index first, the first 5 MiB part carries it
        lead = 5 << 20 if index_location == "start" else 0
        assert report.nbytes < lead + (2 << 20), report
    assert_same(_read_zarr(url, options), data)
    assert_same(_read_tensorstore(bucket, "big.zarr", options), data)
    assert shardpipe.verify(url, storage_options=options).ok
    info = shardpipe.info(url, storage_options=options)
    assert info.nbytes_unused > 0
    shardpipe.compact(url, storage_options=options, threshold=0.0)
    assert shardpipe.info(url, storage_options=options).nbytes_unused == 0
    assert_same(_read_tensorstore(bucket, "big.zarr", options), data)
    assert _leftovers(bucket, options) == ([], [])


@pytest.mark.parametrize("strategy", ["auto", "append", "rewrite"])
def test_region_and_append_on_small_shards(
    s3_bucket: tuple[str, dict[str, Any]], strategy: str
) -> None:
    """Shards under 5 MiB cannot be composed: they are rewritten, conditionally."""
    bucket, options = s3_bucket
    url = f"s3://{bucket}/small.zarr"
    rng = np.random.default_rng(1)
    data = rng.integers(0, 9, (40, 30, 32), dtype="uint16")
    shardpipe.to_sharded_zarr(
        da.from_array(data, chunks=(13, 11, 16)),
        url,
        shards=(16, 16, 16),
        chunks=(4, 8, 8),
        storage_options=options,
    )
    before = _objects(bucket, options)
    new = rng.integers(0, 9, (9, 17, 5), dtype="uint16")
    region = np.s_[3:12, 5:22, 20:25]
    report = shardpipe.prepare_write(
        da.from_array(new, chunks=(5, 7, 5)),
        url,
        region=region,
        write_strategy=strategy,
        storage_options=options,
    ).execute()
    data[region] = new
    assert report.strategies == {"rewrite": 2}
    after = _objects(bucket, options)
    changed = {k for k in before if after.get(k) != before[k]}
    # the two shards, and the first write's job record, retired by the update
    assert changed == {
        "small.zarr/c/0/0/1",
        "small.zarr/c/0/1/1",
        "small.zarr/.shardpipe/write.json",
    }
    assert "small.zarr/.shardpipe/write.json" not in after
    more = rng.integers(0, 9, (6, 30, 32), dtype="uint16")
    shardpipe.to_sharded_zarr(
        more, url, append_dim=0, write_strategy=strategy, storage_options=options
    )
    data = np.concatenate([data, more])
    assert_same(_read_zarr(url, options), data)
    assert_same(_read_tensorstore(bucket, "small.zarr", options), data)
    assert shardpipe.verify(url, storage_options=options).ok
    assert _leftovers(bucket, options) == ([], [])
    assert not any(".shardpipe/" in k for k in _objects(bucket, options))
