"""Writes to GCS (fake-gcs-server on 127.0.0.1): whole-shard uploads and shards composed from parts.

Read back with zarr-python (through gcsfs) and with tensorstore's ``gcs``
kvstore driver, pointed at the emulator by ``TENSORSTORE_GCS_HTTP_URL``.
"""

from __future__ import annotations

import time
from typing import Any

import dask
import dask.array as da
import numpy as np
import pytest
import zarr
from zarr.codecs import ZstdCodec

import shardpipe
from shardpipe.storage.resolve import resolve_store
from shardpipe.testing.gcs import gcs_object_names
from tests.support.readers import assert_same, read_tensorstore
from tests.support.volumes import cloud_volume, large_cloud_source

pytestmark = pytest.mark.gcs

PARTS_MAX_MEM = "20MB"
"""A budget under which the 32 MiB shards of ``large_cloud_source`` are written in parts."""


def read_zarr(url: str, storage_options: dict[str, Any]) -> np.ndarray:
    """The whole array at ``url``, read by zarr-python through gcsfs."""
    return np.asarray(zarr.open_array(url, mode="r", storage_options=storage_options)[...])


def read_tensorstore_gcs(
    monkeypatch: pytest.MonkeyPatch, bucket: str, path: str, storage_options: dict[str, Any]
) -> np.ndarray:
    """The whole array at ``gs://bucket/path``, read by tensorstore's gcs driver on the emulator."""
    monkeypatch.setenv("TENSORSTORE_GCS_HTTP_URL", storage_options["endpoint_url"])
    monkeypatch.setenv("GCE_METADATA_ROOT", "127.0.0.1:1")  # no metadata server: anonymous
    return read_tensorstore("", {"driver": "gcs", "bucket": bucket, "path": f"{path}/"})


def staged(bucket: str, storage_options: dict[str, Any]) -> list[str]:
    """Objects under any staging prefix in ``bucket``: part objects a write left."""
    names = gcs_object_names(storage_options["endpoint_url"], bucket)
    return [name for name in names if ".shardpipe/staging" in name]


@pytest.mark.parametrize("index_location", ["end", "start"])
@pytest.mark.parametrize(
    ("dask_chunks", "max_mem"),
    [
        ((24, 32, 64), "64MB"),  # aligned whole-shard uploads
        ((10, 30, 17), "64MB"),  # misaligned whole-shard uploads
        ((8, 512, 512), PARTS_MAX_MEM),  # 32 MiB shards: parts from several tasks
        ((7, 300, 512), PARTS_MAX_MEM),  # parts gathered from misaligned blocks
    ],
)
def test_gcs_round_trip(
    gcs_bucket: tuple[str, dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    index_location: str,
    dask_chunks: Any,
    max_mem: Any,
) -> None:
    bucket, storage_options = gcs_bucket
    in_parts = max_mem == PARTS_MAX_MEM
    if in_parts:
        source, data = large_cloud_source(dask_chunks)
    else:
        data = cloud_volume()
        source = da.from_array(data, chunks=dask_chunks)
    url = f"gs://{bucket}/volume.zarr"
    job = shardpipe.prepare_write(
        source,
        url,
        shards=data.shape,
        chunks=(8, 128, 128) if in_parts else (8, 16, 16),
        compressors=ZstdCodec(level=1),
        index_location=index_location,
        max_mem=max_mem,
        storage_options=storage_options,
    )
    assert (job.plan.n_multipart_shards > 0) == in_parts, job.plan
    job.execute()
    assert_same(read_zarr(url, storage_options), data)
    assert_same(read_tensorstore_gcs(monkeypatch, bucket, "volume.zarr", storage_options), data)
    report = shardpipe.verify(url, storage_options=storage_options)
    assert report.ok, str(report)
    assert staged(bucket, storage_options) == []


@pytest.mark.cluster
def test_gcs_parts_on_a_cluster(
    cluster_client: Any, gcs_bucket: tuple[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Parts from worker processes (the backend pickled into each) compose into one shard."""
    bucket, storage_options = gcs_bucket
    source, data = large_cloud_source((9, 512, 512))
    url = f"gs://{bucket}/volume.zarr"
    assert dask.base.get_scheduler() == cluster_client.get
    job = shardpipe.prepare_write(
        source,
        url,
        shards=data.shape,
        chunks=(8, 128, 128),
        index_location="start",
        max_mem=PARTS_MAX_MEM,
        storage_options=storage_options,
    )
    assert job.plan.n_multipart_shards == 1
    job.execute()
    assert_same(read_zarr(url, storage_options), data)
    assert_same(read_tensorstore_gcs(monkeypatch, bucket, "volume.zarr", storage_options), data)
    assert staged(bucket, storage_options) == []


@pytest.mark.parametrize("scheme", ["gs", "gcs"])
def test_both_schemes_resolve_to_the_gcs_backend(
    gcs_bucket: tuple[str, dict[str, Any]], scheme: str
) -> None:
    bucket, storage_options = gcs_bucket
    resolved = resolve_store(f"{scheme}://{bucket}/v.zarr", storage_options=storage_options)
    assert repr(resolved.shards).startswith(f"RetryingStore(GcsShardStore('{bucket}/v.zarr')")
    data = cloud_volume()
    shardpipe.to_sharded_zarr(
        data,
        f"{scheme}://{bucket}/v.zarr",
        shards=(16, 64, 64),
        chunks=(8, 32, 32),
        storage_options=storage_options,
    )
    assert_same(read_zarr(f"gs://{bucket}/v.zarr", storage_options), data)


def _failing(block: np.ndarray, block_info: Any = None) -> np.ndarray:
    if block_info is not None and block_info[None]["chunk-location"] == (4, 0, 1):
        time.sleep(0.5)  # let the other parts of the shard upload first
        raise RuntimeError("simulated worker failure")
    return block


def test_gcs_failure_midway_leaves_nothing_staged(gcs_bucket: tuple[str, dict[str, Any]]) -> None:
    bucket, storage_options = gcs_bucket
    generated, data = large_cloud_source((8, 512, 512))
    source = generated.map_blocks(_failing, dtype=data.dtype)
    url = f"gs://{bucket}/volume.zarr"
    with dask.config.set(scheduler="threads"), pytest.raises(RuntimeError, match="simulated"):
        shardpipe.to_sharded_zarr(
            source,
            url,
            shards=data.shape,
            chunks=(8, 128, 128),
            max_mem=PARTS_MAX_MEM,
            storage_options=storage_options,
        )
    assert staged(bucket, storage_options) == []
    array = zarr.open_array(url, mode="r", storage_options=storage_options)
    assert array.nchunks_initialized == 0  # no object under the shard's key


def test_a_large_whole_shard_goes_up_composed_from_parts_sent_at_once(
    gcs_bucket: tuple[str, dict[str, Any]],
) -> None:
    """A shard handed to the uploads that is two part sizes or more goes up in parts.

    (:mod:`shardpipe.storage.parted_puts`: here 16 MiB shards in parts of
    5 MiB, composed into each shard, the part objects deleted after.)
    """
    bucket, options = gcs_bucket
    source = da.random.default_rng(13).integers(0, 256, (32, 512, 1024), chunks=(32, 512, 512))
    source = source.astype("uint8")
    url = f"gs://{bucket}/large.zarr"
    with dask.config.set({"shardpipe.uploads.part-size": 5 << 20}, scheduler="threads"):
        job = shardpipe.prepare_write(
            source, url, shards=(32, 512, 512), chunks=(32, 128, 128), storage_options=options
        )
        assert "in parts of 5.0 MiB" in repr(job)
        report = job.execute()
    assert report.shards_written == 2
    np.testing.assert_array_equal(read_zarr(url, options), source.compute())
    assert staged(bucket, options) == []
    assert shardpipe.verify(url, storage_options=options).ok
