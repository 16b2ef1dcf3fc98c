"""Large shards handed to the uploads go up in parts at once (moto, directly and behind a proxy).

A shard of two part sizes or more on S3 becomes one multipart upload whose
parts are sent :data:`~shardpipe.storage.parted_puts.PARTS_AT_ONCE` at a
time and completed in one step (:mod:`shardpipe.storage.parted_puts`).
Checked against the server: the shards are multipart objects read back
equal; a part that fails aborts its upload and fails the write, leaving no
open upload; a kill -9 while parts are in flight leaves a state that
``resume=True`` completes and ``cleanup`` empties.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import boto3
import dask
import dask.array as da
import numpy as np
import pytest
import zarr

import shardpipe
from shardpipe.errors import InvalidArgumentError, StorageError
from shardpipe.storage.parted_puts import PARTS_AT_ONCE, part_size
from shardpipe.testing.fault_proxy import FaultProxy
from shardpipe.testing.s3 import storage_options_for
from tests.support.fork_server import ForkServer

pytestmark = pytest.mark.s3

PART = 5 << 20
SHAPE = (128, 512, 512)
"""32 MiB of random uint8 in 2 shards of 16 MiB (incompressible): each one 4 parts of 5 MiB."""
SHARDS = (64, 512, 512)
CHUNKS = (32, 128, 128)
UPLOAD_PARTS = b"partNumber="
FAST_RETRIES = {"shardpipe.retry.first-delay": 0.05, "shardpipe.retry.max-delay": 0.5}
ONE_TRY = {"mode": "standard", "max_attempts": 1}
"""botocore's retries off (``config_kwargs``): a fault goes straight to shardpipe's."""


def _client(options: dict[str, Any]) -> Any:
    kw = options["client_kwargs"]
    return boto3.client(
        "s3",
        endpoint_url=kw["endpoint_url"],
        region_name=kw["region_name"],
        aws_access_key_id=options["key"],
        aws_secret_access_key=options["secret"],
    )


def _source(shape: tuple[int, ...] = SHAPE) -> tuple[da.Array, np.ndarray]:
    source = da.random.default_rng(5).integers(0, 256, shape, chunks=SHARDS, dtype="uint8")
    return source, source.compute(scheduler="threads")


def _write(source: da.Array, url: str, options: dict[str, Any], **kwargs: Any) -> Any:
    settings = {**FAST_RETRIES, "shardpipe.uploads.part-size": PART}
    with dask.config.set(settings, scheduler="threads"):
        job = shardpipe.prepare_write(
            source, url, shards=SHARDS, chunks=CHUNKS, storage_options=options, **kwargs
        )
        return job.execute()


def _open_uploads(bucket: str, options: dict[str, Any]) -> list[str]:
    found = _client(options).list_multipart_uploads(Bucket=bucket).get("Uploads", [])
    return [upload["Key"] for upload in found]


def test_large_shards_go_up_as_multipart_objects(s3_bucket: tuple[str, dict[str, Any]]) -> None:
    bucket, direct = s3_bucket
    source, data = _source()
    url = f"s3://{bucket}/x.zarr"
    report = _write(source, url, direct)
    assert report.shards_written == 2
    client = _client(direct)
    for key in ("x.zarr/c/0/0/0", "x.zarr/c/1/0/0"):
        etag = client.head_object(Bucket=bucket, Key=key)["ETag"].strip('"')
        assert etag.endswith("-4")  # a multipart object: 16 MiB in parts of 5 MiB
    np.testing.assert_array_equal(zarr.open_array(url, storage_options=direct)[...], data)
    assert shardpipe.verify(url, storage_options=direct).ok
    assert _open_uploads(bucket, direct) == []
    listed = client.list_objects_v2(Bucket=bucket).get("Contents", [])
    assert not [o["Key"] for o in listed if "/staging/" in o["Key"]]


def test_small_shards_stay_single_puts(s3_bucket: tuple[str, dict[str, Any]]) -> None:
    bucket, direct = s3_bucket
    source, _ = _source()
    url = f"s3://{bucket}/x.zarr"
    with dask.config.set({"shardpipe.uploads.part-size": 16 << 20}):
        shardpipe.to_sharded_zarr(source, url, shards=SHARDS, chunks=CHUNKS, storage_options=direct)
    etag = _client(direct).head_object(Bucket=bucket, Key="x.zarr/c/0/0/0")["ETag"]
    assert "-" not in etag  # 16 MiB is less than two parts of 16 MiB: one PutObject


def test_a_failed_part_aborts_its_upload_and_fails_the_write(
    s3_bucket: tuple[str, dict[str, Any]], s3_fault_proxy: FaultProxy
) -> None:
    bucket, direct = s3_bucket
    proxy = s3_fault_proxy
    proxy.add_rule("reset_before", UPLOAD_PARTS, count=1000)  # no part ever arrives
    options = storage_options_for(proxy.url)
    # botocore tries once, shardpipe's retries (FAST_RETRIES) retry: failing took 16 s
    options["config_kwargs"] = {"connect_timeout": 1, "read_timeout": 3, "retries": ONE_TRY}
    source, data = _source(SHARDS)  # one shard of 4 parts: one upload to abort
    url = f"s3://{bucket}/x.zarr"
    with pytest.raises(StorageError, match="c/0/0/0"):
        _write(source, url, options)
    assert _open_uploads(bucket, direct) == []  # aborted, not left behind
    proxy._state.rules.clear()
    report = _write(source, url, options, resume=True)
    assert report.shards_written == 1
    np.testing.assert_array_equal(zarr.open_array(url, storage_options=direct)[...], data)


CHILD = """
import sys, dask, dask.array as da, shardpipe
from shardpipe.testing.s3 import storage_options_for
url, endpoint = sys.argv[1:3]
source = da.random.default_rng(5).integers(0, 256, (128, 512, 512), chunks=(64, 512, 512),
                                           dtype="uint8")
options = storage_options_for(endpoint)
options["config_kwargs"] = {"connect_timeout": 1, "read_timeout": 120}
with dask.config.set({"shardpipe.uploads.part-size": 5 << 20}, scheduler="threads"):
    shardpipe.to_sharded_zarr(source, url, shards=(64, 512, 512), chunks=(32, 128, 128),
                              storage_options=options)
"""


def test_kill_with_parts_in_flight_then_resume_and_cleanup(
    s3_bucket: tuple[str, dict[str, Any]],
    s3_fault_proxy: FaultProxy,
    tmp_path: Path,
    fork_server: ForkServer,
) -> None:
    bucket, direct = s3_bucket
    proxy = s3_fault_proxy
    proxy.configure(stall=1.0, match=UPLOAD_PARTS)
    proxy.stall_seconds = 60  # every part's answer held back until the kill
    url = f"s3://{bucket}/killed.zarr"
    child = fork_server.start(None, [url, proxy.url], code=CHILD)
    try:
        deadline = time.monotonic() + 120
        while proxy.counts.stall < 4 and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proxy.counts.stall >= 4, proxy.counts  # both shards' parts in flight
        child.kill()
    finally:
        child.kill()
        child.wait(30)
    proxy.configure()
    assert _open_uploads(bucket, direct)  # the kill left the uploads open
    source, data = _source()
    report = _write(source, url, direct, resume=True)
    assert report.shards_written == 2
    np.testing.assert_array_equal(zarr.open_array(url, storage_options=direct)[...], data)
    shardpipe.cleanup(url, storage_options=direct)
    assert _open_uploads(bucket, direct) == []
    listed = _client(direct).list_objects_v2(Bucket=bucket).get("Contents", [])
    assert [o["Key"] for o in listed if "/.shardpipe/" in o["Key"]] == [
        "killed.zarr/.shardpipe/write.json"
    ]


def test_the_part_size_setting_is_checked() -> None:
    assert part_size() == 16 << 20
    for bad in (1 << 20, "16MB", True, 2 << 30):
        with (
            dask.config.set({"shardpipe.uploads.part-size": bad}),
            pytest.raises(InvalidArgumentError, match=r"shardpipe\.uploads\.part-size"),
        ):
            part_size()
    assert PARTS_AT_ONCE >= 2


def test_the_plan_shows_which_shards_go_in_parts(s3_bucket: tuple[str, dict[str, Any]]) -> None:
    bucket, direct = s3_bucket
    source, _ = _source()
    with dask.config.set({"shardpipe.uploads.part-size": PART}):
        job = shardpipe.prepare_write(
            source, f"s3://{bucket}/x.zarr", shards=SHARDS, chunks=CHUNKS, storage_options=direct
        )
        shown = repr(job)
    assert "shards of 10.0 MiB or more in parts of 5.0 MiB" in shown, shown
