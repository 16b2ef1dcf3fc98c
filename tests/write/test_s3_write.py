"""Writes to S3 (a moto server on 127.0.0.1, through s3fs), single PUTs and multipart shards."""

from __future__ import annotations

import time
from typing import Any

import boto3
import dask
import dask.array as da
import numpy as np
import pytest
import zarr
from zarr.codecs import ZstdCodec

import shardpipe
from tests.support.readers import assert_same, read_tensorstore
from tests.support.volumes import cloud_volume, large_cloud_source

pytestmark = pytest.mark.s3


MULTIPART_MAX_MEM = "20MB"
"""A budget under which the 32 MiB shards of ``large_cloud_source`` are written in parts.

On S3 a part task holds its part padded to 5 MiB and the backend's copy of it
(the enforced memory model counts both), besides its blocks or pieces, so
multipart writes need a budget of about 13-18 MB at least; the shards are 1.7
times this one.
"""


def _read_zarr(url: str, storage_options: dict[str, Any]) -> np.ndarray:
    return np.asarray(zarr.open_array(url, mode="r", storage_options=storage_options)[...])


def _read_tensorstore(bucket: str, path: str, storage_options: dict[str, Any]) -> np.ndarray:
    endpoint = storage_options["client_kwargs"]["endpoint_url"]
    kvstore = {
        "driver": "s3",
        "bucket": bucket,
        "path": f"{path}/",
        "endpoint": endpoint,
        "aws_region": "us-east-1",
        "aws_credentials": {"type": "environment"},
    }
    return read_tensorstore("", kvstore)


def _leftovers(bucket: str, storage_options: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Open multipart uploads and staging objects in ``bucket``."""
    kw = storage_options["client_kwargs"]
    client = boto3.client("s3", endpoint_url=kw["endpoint_url"], region_name=kw["region_name"])
    uploads = client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
    objects = client.list_objects_v2(Bucket=bucket).get("Contents", [])
    staging = [o["Key"] for o in objects if ".shardpipe/staging" in o["Key"]]
    return [u["Key"] for u in uploads], staging


@pytest.mark.parametrize("index_location", ["end", "start"])
@pytest.mark.parametrize(
    ("dask_chunks", "max_mem"),
    [
        ((24, 32, 64), "64MB"),  # aligned single-PUT shards
        ((10, 30, 17), "64MB"),  # misaligned single-PUT shards
        ((8, 512, 512), MULTIPART_MAX_MEM),  # 32 MiB shards: parts of one upload each
        ((7, 300, 512), MULTIPART_MAX_MEM),  # parts gathered from misaligned blocks
    ],
)
def test_s3_round_trip(
    s3_bucket: tuple[str, dict[str, Any]], index_location: str, dask_chunks: Any, max_mem: Any
) -> None:
    bucket, storage_options = s3_bucket
    multipart = max_mem == MULTIPART_MAX_MEM
    if multipart:
        source, data = large_cloud_source(dask_chunks)
    else:
        data = cloud_volume()
        source = da.from_array(data, chunks=dask_chunks)
    url = f"s3://{bucket}/volume.zarr"
    shardpipe.to_sharded_zarr(
        source,
        url,
        shards=data.shape,
        chunks=(8, 128, 128) if multipart else (8, 16, 16),
        compressors=ZstdCodec(level=1),
        index_location=index_location,
        max_mem=max_mem,
        storage_options=storage_options,
    )
    assert_same(_read_zarr(url, storage_options), data)
    assert_same(_read_tensorstore(bucket, "volume.zarr", storage_options), data)
    report = shardpipe.verify(url, storage_options=storage_options)
    assert report.ok, str(report)
    in_parts = sum(s.unused_bytes for s in report.shards) > 0  # parts padded to S3's 5 MiB
    assert in_parts == multipart
    assert _leftovers(bucket, storage_options) == ([], [])


def test_s3_parts_on_a_cluster(cluster_client: Any, s3_bucket: tuple[str, dict[str, Any]]) -> None:
    bucket, storage_options = s3_bucket
    source, data = large_cloud_source((9, 512, 512))
    url = f"s3://{bucket}/volume.zarr"
    assert dask.base.get_scheduler() == cluster_client.get
    shardpipe.to_sharded_zarr(
        source,
        url,
        shards=data.shape,
        chunks=(8, 128, 128),
        index_location="start",
        max_mem=MULTIPART_MAX_MEM,
        storage_options=storage_options,
    )
    assert_same(_read_zarr(url, storage_options), data)
    assert_same(_read_tensorstore(bucket, "volume.zarr", storage_options), data)
    assert _leftovers(bucket, storage_options) == ([], [])


def _failing(block: np.ndarray, block_info: Any = None) -> np.ndarray:
    if block_info is not None and block_info[None]["chunk-location"] == (4, 0, 1):
        time.sleep(0.5)  # let the other parts of the shard upload first
        raise RuntimeError("simulated worker failure")
    return block


def test_s3_failure_midway_leaves_nothing_partial(s3_bucket: tuple[str, dict[str, Any]]) -> None:
    bucket, storage_options = s3_bucket
    generated, data = large_cloud_source((8, 512, 512))
    source = generated.map_blocks(_failing, dtype=data.dtype)
    url = f"s3://{bucket}/volume.zarr"
    with dask.config.set(scheduler="threads"), pytest.raises(RuntimeError, match="simulated"):
        shardpipe.to_sharded_zarr(
            source,
            url,
            shards=data.shape,
            chunks=(8, 128, 128),
            max_mem=MULTIPART_MAX_MEM,
            storage_options=storage_options,
        )
    assert _leftovers(bucket, storage_options) == ([], [])
    array = zarr.open_array(url, mode="r", storage_options=storage_options)
    assert array.nchunks_initialized == 0  # no object under the shard's key


def test_a_new_array_costs_its_shards_and_nine_requests(
    s3_bucket: tuple[str, dict[str, Any]], s3_fault_proxy: Any
) -> None:
    """Besides one PUT per shard, a new array's write sends nine requests, six before.

    Before the shards: the check that the bucket answers (a GET), the target listed
    before anything is written, the job's marker, one listing under the marker (its
    recovery and the check of the target again share it), the job record,
    ``zarr.json``. After: the record marked complete while the marker is read, then
    the marker's delete. On a store with 20-30 ms a request each one in a row is
    felt: a listing more and the marker read after the record cost two round trips.
    """
    from shardpipe.testing.s3 import storage_options_for

    bucket, direct = s3_bucket
    x = da.random.default_rng(6).integers(0, 250, (16, 128, 256), chunks=(16, 128, 128))
    before = s3_fault_proxy.counts.requests
    shardpipe.to_sharded_zarr(
        x.astype("uint8"), f"s3://{bucket}/new.zarr", shards=(16, 128, 128),
        chunks=(16, 64, 64), storage_options=storage_options_for(s3_fault_proxy.url),
    )  # fmt: skip
    assert s3_fault_proxy.counts.requests - before == 2 + 9
    assert_same(_read_zarr(f"s3://{bucket}/new.zarr", direct), x.astype("uint8").compute())


def test_overwrite_removes_the_old_array_in_a_few_requests(
    s3_bucket: tuple[str, dict[str, Any]], s3_fault_proxy: Any
) -> None:
    """Replacing an array of 16 shards costs two requests more than writing it anew.

    The old keys are listed once and removed by one ``DeleteObjects`` (and the old job
    record by its own delete, first), not one request per object: on a store with
    30 ms a request, 10,000 shards removed one by one took five minutes.
    """
    from shardpipe.testing.s3 import storage_options_for

    bucket, direct = s3_bucket
    options = storage_options_for(s3_fault_proxy.url)
    x = da.random.default_rng(5).integers(0, 250, (32, 256, 512), chunks=(16, 64, 128))
    url = f"s3://{bucket}/old.zarr"

    def requests_of_a_write(data: da.Array) -> int:
        before = s3_fault_proxy.counts.requests
        shardpipe.to_sharded_zarr(
            data.astype("uint8"), url, shards=(16, 128, 128), chunks=(16, 64, 64),
            overwrite=True, storage_options=options,
        )  # fmt: skip
        return s3_fault_proxy.counts.requests - before

    anew = requests_of_a_write(x)
    replacing = requests_of_a_write(x + 1)
    assert replacing - anew == 2
    assert_same(_read_zarr(url, direct), (x + 1).astype("uint8").compute())
