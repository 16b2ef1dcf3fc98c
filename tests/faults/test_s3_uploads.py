"""S3 writes whose shards go up in the background while tasks encode (moto behind a proxy).

Shard tasks hand their encoded shards to their process's uploads
(:mod:`shardpipe.storage.uploads`). Checked against the server directly:
uploads in flight stay within ``max_mem`` and the request limit; a shard
counts as written only once its upload ended; a failed upload fails the write
and nothing lands after the error is raised; a share of network faults is
carried through; a kill -9 with 16 uploads in flight leaves a state that
``resume=True`` completes.
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
from shardpipe.errors import StorageError
from shardpipe.storage import uploads
from shardpipe.testing.fault_proxy import FaultProxy
from shardpipe.testing.s3 import storage_options_for
from tests.support.fork_server import ForkServer

pytestmark = pytest.mark.s3

SHAPE = (32, 512, 512)
"""8 MiB of uint8 in 16 shards of 512 KiB: every shard one whole put."""
SHARDS = (32, 128, 128)
CHUNKS = (16, 64, 64)
SHARD_PUTS = b"/c/"
"""What the request line of a shard's PUT holds (and no marker's or record's)."""
TIMEOUTS = {"connect_timeout": 1, "read_timeout": 3}
FAST_RETRIES = {"shardpipe.retry.first-delay": 0.05, "shardpipe.retry.max-delay": 0.5}


def _source(seed: int = 3) -> tuple[da.Array, np.ndarray]:
    source = da.random.default_rng(seed).integers(0, 250, SHAPE, chunks=SHARDS, dtype="uint8")
    return source, source.compute(scheduler="threads")


def _proxied(proxy: FaultProxy) -> dict[str, Any]:
    options = storage_options_for(proxy.url)
    options["config_kwargs"] = dict(TIMEOUTS)
    return options


def _objects(bucket: str, options: dict[str, Any]) -> list[str]:
    kw = options["client_kwargs"]
    client = boto3.client(
        "s3",
        endpoint_url=kw["endpoint_url"],
        region_name=kw["region_name"],
        aws_access_key_id=options["key"],
        aws_secret_access_key=options["secret"],
    )
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return sorted(obj["Key"] for page in pages for obj in page.get("Contents", []))


def _write(source: da.Array, url: str, options: dict[str, Any], **kwargs: Any) -> Any:
    with dask.config.set(FAST_RETRIES, scheduler="threads"):
        job = shardpipe.prepare_write(
            source, url, shards=SHARDS, chunks=CHUNKS, storage_options=options, **kwargs
        )
        return job.execute()


def _read(url: str, options: dict[str, Any]) -> np.ndarray:
    return np.asarray(zarr.open_array(url, mode="r", storage_options=options)[...])


def _fresh_peaks() -> uploads.Uploads:
    held = uploads.process_uploads()
    held.peak_nbytes = held.peak_requests = 0
    return held


def test_uploads_in_flight_stay_within_max_mem(
    s3_bucket: tuple[str, dict[str, Any]], s3_fault_proxy: FaultProxy
) -> None:
    bucket, direct = s3_bucket
    s3_fault_proxy.configure(stall=1.0, match=SHARD_PUTS)  # every shard's answer held back
    s3_fault_proxy.stall_seconds = 0.3
    source, data = _source()
    held = _fresh_peaks()
    max_mem = 2_200_000  # room for four shards of 512 KiB in flight (of 16)
    report = _write(source, f"s3://{bucket}/x.zarr", _proxied(s3_fault_proxy), max_mem=max_mem)
    assert report.shards_written == 16
    assert 2 <= held.peak_requests <= 4  # tasks went on encoding while shards went up
    assert held.peak_nbytes <= max_mem
    np.testing.assert_array_equal(_read(f"s3://{bucket}/x.zarr", direct), data)


def test_uploads_in_flight_stay_within_the_request_limit(
    s3_bucket: tuple[str, dict[str, Any]], s3_fault_proxy: FaultProxy
) -> None:
    bucket, direct = s3_bucket
    s3_fault_proxy.configure(stall=1.0, match=SHARD_PUTS)
    s3_fault_proxy.stall_seconds = 0.5
    source, data = _source()
    held = _fresh_peaks()
    with dask.config.set({"shardpipe.uploads.requests": 3}):
        report = _write(source, f"s3://{bucket}/x.zarr", _proxied(s3_fault_proxy))
    assert report.shards_written == 16
    assert held.peak_requests == 3  # encoding 3 shards takes far less than 0.5 s
    np.testing.assert_array_equal(_read(f"s3://{bucket}/x.zarr", direct), data)


def test_a_failed_upload_fails_the_write_and_nothing_lands_after(
    s3_bucket: tuple[str, dict[str, Any]], s3_fault_proxy: FaultProxy
) -> None:
    bucket, direct = s3_bucket
    proxy = s3_fault_proxy
    proxy.configure(stall=1.0, match=SHARD_PUTS)
    proxy.stall_seconds = 0.4  # other shards are still in flight when the failure is known
    proxy.add_rule("reset_before", b"/c/0/1/1", count=1000)  # one shard never lands
    source, data = _source()
    url = f"s3://{bucket}/x.zarr"
    options = _proxied(proxy)  # botocore tries once, shardpipe retries: failing took 12 s
    options["config_kwargs"]["retries"] = {"mode": "standard", "max_attempts": 1}
    with pytest.raises(StorageError, match="c/0/1/1"):
        _write(source, url, options)
    after_error = _objects(bucket, direct)
    time.sleep(1.0)  # anything still in flight would land now
    assert _objects(bucket, direct) == after_error
    assert not any(k.endswith("c/0/1/1") for k in after_error)
    proxy.configure()
    proxy._state.rules.clear()
    report = _write(source, url, _proxied(proxy), resume=True)
    assert report.shards_written + report.shards_skipped == 16
    np.testing.assert_array_equal(_read(url, direct), data)
    assert shardpipe.verify(url, storage_options=direct).ok


@pytest.mark.parametrize("seed", range(2))
def test_background_uploads_survive_a_share_of_network_faults(
    s3_bucket: tuple[str, dict[str, Any]], s3_fault_proxy: FaultProxy, seed: int
) -> None:
    bucket, direct = s3_bucket
    proxy = s3_fault_proxy
    proxy.stall_seconds = 4  # longer than the read timeout: the client gives up and retries
    proxy.drop_seconds = 4
    proxy._rng.seed(seed)
    proxy.configure(reset_before=0.05, reset_after=0.05, drop=0.03, stall=0.03)
    # a write sends about 25 requests: a seed's draws may spare them all, so one shard's
    # PUT is always reset after it arrived (the store may hold it, the client retries)
    proxy.add_rule("reset_after", SHARD_PUTS, method=b"PUT")
    source, data = _source(seed)
    url = f"s3://{bucket}/x.zarr"
    report = _write(source, url, _proxied(proxy))
    proxy.configure()
    assert proxy.counts.faults > 0
    assert report.shards_written == 16
    np.testing.assert_array_equal(_read(url, direct), data)
    assert shardpipe.verify(url, storage_options=direct).ok
    assert not [k for k in _objects(bucket, direct) if ".shardpipe/staging" in k]


CHILD = """
import sys, dask, dask.array as da, shardpipe
from shardpipe.testing.s3 import storage_options_for
url, endpoint = sys.argv[1:3]
source = da.random.default_rng(3).integers(0, 250, (32, 512, 1024), chunks=(32, 128, 128),
                                           dtype="uint8")
options = storage_options_for(endpoint)
options["config_kwargs"] = {"connect_timeout": 1, "read_timeout": 120}
with dask.config.set(scheduler="threads"):
    shardpipe.to_sharded_zarr(source, url, shards=(32, 128, 128), chunks=(16, 64, 64),
                              storage_options=options)
"""


def test_kill_with_16_uploads_in_flight_then_resume(
    s3_bucket: tuple[str, dict[str, Any]],
    s3_fault_proxy: FaultProxy,
    tmp_path: Path,
    fork_server: ForkServer,
) -> None:
    bucket, direct = s3_bucket
    proxy = s3_fault_proxy
    proxy.configure(stall=1.0, match=SHARD_PUTS)
    proxy.stall_seconds = 60  # every shard's answer held back until the kill
    url = f"s3://{bucket}/killed.zarr"
    child = fork_server.start(None, [url, proxy.url], code=CHILD)
    try:
        deadline = time.monotonic() + 120
        while proxy.counts.stall < 16 and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proxy.counts.stall >= 16, proxy.counts  # 16 uploads at once, none answered
        child.kill()
    finally:
        child.kill()
        child.wait(30)
    proxy.configure()
    source = da.random.default_rng(3).integers(
        0, 250, (32, 512, 1024), chunks=(32, 128, 128), dtype="uint8"
    )
    report = _write(source, url, direct, resume=True)
    assert report.shards_written + report.shards_skipped == 32
    np.testing.assert_array_equal(_read(url, direct), source.compute())
    assert shardpipe.verify(url, storage_options=direct).ok
    shardpipe.cleanup(url, storage_options=direct)
    # nothing staged or held: only the record of the write, complete
    assert [k for k in _objects(bucket, direct) if "/.shardpipe/" in k] == [
        "killed.zarr/.shardpipe/write.json"
    ]


def _reset_peaks() -> None:
    _fresh_peaks()


def _peak_requests() -> int:
    return uploads.process_uploads().peak_requests


def test_each_cluster_worker_hands_its_uploads_on(
    s3_bucket: tuple[str, dict[str, Any]], s3_fault_proxy: FaultProxy, cluster_client: Any
) -> None:
    bucket, direct = s3_bucket
    s3_fault_proxy.configure(stall=1.0, match=SHARD_PUTS)
    s3_fault_proxy.stall_seconds = 0.5
    cluster_client.run(_reset_peaks)
    source, data = _source()
    url = f"s3://{bucket}/x.zarr"
    job = shardpipe.prepare_write(
        source, url, shards=SHARDS, chunks=CHUNKS, storage_options=_proxied(s3_fault_proxy)
    )
    report = job.execute()
    assert report.shards_written == 16
    # one thread per worker, yet each worker had several shards going up at once
    peaks = cluster_client.run(_peak_requests)
    assert len(peaks) == 2 and all(peak >= 2 for peak in peaks.values()), peaks
    np.testing.assert_array_equal(_read(url, direct), data)
