"""GCS writes through a TCP proxy that resets and drops requests (fake-gcs-server behind it).

After every write the invariant is checked against the emulator directly
(not through the proxy): the array reads back equal to the source,
``verify`` is clean, and nothing is left under the staging prefix. Then
single faults at the worst moments (a conditional upload or the publishing
``compose`` whose answer is lost), a kill -9 in the middle of a shard's
parts, two writers on one array, and the command line's exit status for a
bucket that does not exist.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import dask
import dask.array as da
import gcsfs.core
import numpy as np
import pytest
import zarr

import shardpipe
from shardpipe.errors import (
    ConditionFailedError,
    JobConflictError,
    StorageAccessError,
    StorageError,
    TransientStorageError,
)
from shardpipe.storage.gcs import faults
from shardpipe.storage.gcs.store import GcsShardStore
from shardpipe.testing.fault_proxy import FaultProxy
from shardpipe.testing.gcs import gcs_object_names, gcs_storage_options_for
from tests.support.fork_server import ForkServer

pytestmark = pytest.mark.gcs

SHAPE = (16, 1024, 1024)
"""16 MiB of uint8: two shards of 8 MiB, each written as parts under MAX_MEM."""
SHARDS = (16, 1024, 512)
CHUNKS = (8, 128, 128)
MAX_MEM = "20MB"
FAST_RETRIES = {"shardpipe.retry.first-delay": 0.05, "shardpipe.retry.max-delay": 0.5}


def _source(seed: int = 5) -> tuple[da.Array, np.ndarray]:
    source = da.random.default_rng(seed).integers(0, 250, SHAPE, chunks=(8, 256, 256))
    source = source.astype("uint8")
    return source, source.compute(scheduler="threads")


def _write(source: da.Array, url: str, options: dict[str, Any], **kwargs: Any) -> Any:
    with dask.config.set(FAST_RETRIES, scheduler="threads", num_workers=4):
        job = shardpipe.prepare_write(
            source,
            url,
            shards=SHARDS,
            chunks=CHUNKS,
            max_mem=MAX_MEM,
            storage_options=options,
            **kwargs,
        )
        assert job.plan.n_multipart_shards == 2
        return job.execute()


def _staged(bucket: str, direct: dict[str, Any]) -> list[str]:
    names = gcs_object_names(direct["endpoint_url"], bucket)
    return [name for name in names if ".shardpipe/staging" in name]


def _check_outcome(bucket: str, url: str, direct: dict[str, Any], data: np.ndarray) -> None:
    """The invariant: equal and verified; nothing staged left behind."""
    stored = np.asarray(zarr.open_array(url, mode="r", storage_options=direct)[...])
    np.testing.assert_array_equal(stored, data)
    report = shardpipe.verify(url, storage_options=direct)
    assert report.ok, str(report)
    assert _staged(bucket, direct) == []


@pytest.mark.parametrize("seed", range(2))
def test_writes_survive_a_share_of_network_faults(
    gcs_bucket: tuple[str, dict[str, Any]], gcs_fault_proxy: FaultProxy, seed: int
) -> None:
    """About 6% of requests reset before or after the server saw them, or dropped.

    Three writes (about a hundred requests), so that faults are all but sure to be met.
    """
    bucket, direct = gcs_bucket
    proxy = gcs_fault_proxy
    proxy.drop_seconds = 2  # then the silent connection is reset
    proxy._rng.seed(seed)
    proxy.configure(reset_before=0.025, reset_after=0.025, drop=0.01)
    started = time.monotonic()
    for write in range(3):
        source, data = _source(10 * seed + write)
        url = f"gs://{bucket}/x{write}.zarr"
        _write(source, url, gcs_storage_options_for(proxy.url))
        _check_outcome(bucket, url, direct, data)
    elapsed = time.monotonic() - started
    proxy.configure()
    counts = proxy.counts
    assert counts.faults > 0, counts
    assert elapsed < 180, (elapsed, counts)


@pytest.mark.parametrize("condition", ["if_absent", "if_version"])
def test_conditional_upload_whose_answer_was_lost_succeeds(
    gcs_bucket: tuple[str, dict[str, Any]], gcs_fault_proxy: FaultProxy, condition: str
) -> None:
    """The backend sends a conditional upload that landed again: the retry finds the
    precondition false, its token tells that the object is its own; the same bytes
    uploaded by someone else are still refused."""
    bucket, _ = gcs_bucket
    proxy = gcs_fault_proxy
    options = gcs_storage_options_for(proxy.url)
    store = GcsShardStore(gcsfs.core.GCSFileSystem(**options), bucket)
    kwargs: dict[str, Any] = {"if_absent": True}
    if condition == "if_version":
        store.put("k", [b"old"])
        kwargs = {"if_version": store.version("k")}
    proxy.add_rule("reset_after", b"name=k&", method=b"POST")
    store.put("k", [b"mine"], **kwargs)
    assert proxy.counts.reset_after == 1
    assert store.get("k") == b"mine"
    with pytest.raises(ConditionFailedError):
        store.put("k", [b"mine"], if_absent=True)


def test_lost_compose_answer_is_success(
    gcs_bucket: tuple[str, dict[str, Any]], gcs_fault_proxy: FaultProxy
) -> None:
    """The compose that publishes a shard lands, its answer is lost: the retry (refused
    on GCS, composed again on the emulator) still ends in the shard, once."""
    bucket, direct = gcs_bucket
    proxy = gcs_fault_proxy
    source, data = _source()
    url = f"gs://{bucket}/x.zarr"
    proxy.add_rule("reset_after", b"/compose", method=b"POST")  # the first shard's publish
    _write(source, url, gcs_storage_options_for(proxy.url))
    assert proxy.counts.reset_after == 1
    assert "x.zarr%2Fc%2F0%2F0%2F" in proxy.log[0].line, proxy.log
    _check_outcome(bucket, url, direct, data)


def test_lost_marker_answer_is_no_conflict(
    gcs_bucket: tuple[str, dict[str, Any]], gcs_fault_proxy: FaultProxy
) -> None:
    """The job marker is a create-only upload: when its answer is lost and the backend
    sends it again, the write must not take its own marker for another job's."""
    bucket, direct = gcs_bucket
    proxy = gcs_fault_proxy
    source, data = _source()
    url = f"gs://{bucket}/x.zarr"
    proxy.add_rule("reset_after", b"job.json&", method=b"POST")
    _write(source, url, gcs_storage_options_for(proxy.url))
    assert proxy.counts.reset_after == 1
    _check_outcome(bucket, url, direct, data)


CHILD = """
import sys, dask, dask.array as da, shardpipe
from shardpipe.testing.gcs import gcs_storage_options_for
url, endpoint = sys.argv[1:3]
source = da.random.default_rng(5).integers(0, 250, (16, 1024, 1024), chunks=(8, 256, 256))
with dask.config.set(scheduler="threads", num_workers=4):
    shardpipe.to_sharded_zarr(source.astype("uint8"), url, shards=(16, 1024, 512),
                              chunks=(8, 128, 128), max_mem="20MB",
                              storage_options=gcs_storage_options_for(endpoint))
"""


def test_kill_mid_parts_then_resume(
    gcs_bucket: tuple[str, dict[str, Any]], gcs_fault_proxy: FaultProxy, fork_server: ForkServer
) -> None:
    """Killed while the second part of each shard goes up (the first ones are staged):
    ``resume=True`` completes the array and the cleanup leaves nothing staged."""
    bucket, direct = gcs_bucket
    proxy = gcs_fault_proxy
    proxy.stall_seconds = 60  # held back until the kill
    proxy.configure(stall=1.0, match=b"part-000001")
    url = f"gs://{bucket}/killed.zarr"
    child = fork_server.start(None, [url, proxy.url], code=CHILD)
    try:
        deadline = time.monotonic() + 120
        while proxy.counts.stall < 2 and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proxy.counts.stall >= 2, proxy.counts  # both shards' second parts in flight
        assert _staged(bucket, direct) != []  # their first parts are staged
        child.kill()
    finally:
        child.kill()
        child.wait(30)
    proxy.configure()
    source, data = _source()
    report = _write(source, url, direct, resume=True)
    assert report.shards_written + report.shards_skipped == 2
    shardpipe.cleanup(url, storage_options=direct)
    _check_outcome(bucket, url, direct, data)
    left = [n for n in gcs_object_names(direct["endpoint_url"], bucket) if "/.shardpipe/" in n]
    assert left == ["killed.zarr/.shardpipe/write.json"]


def _slow(block: np.ndarray) -> np.ndarray:
    time.sleep(0.2)
    return block + 1


def test_two_writers_on_one_array_one_job_conflict(gcs_bucket: tuple[str, dict[str, Any]]) -> None:
    """A second job on an array while the first holds it stops with ``JobConflictError``."""
    bucket, direct = gcs_bucket
    url = f"gs://{bucket}/shared.zarr"
    data = np.zeros((32, 64, 64), "uint8")
    shardpipe.to_sharded_zarr(
        data, url, shards=(16, 64, 64), chunks=(8, 32, 32), storage_options=direct
    )
    marker = "shared.zarr/.shardpipe/job.json"
    outcomes: list[Any] = []

    def update(value: int) -> None:
        source = da.from_array(np.full((32, 64, 64), value, "uint8"), chunks=(8, 64, 64))
        try:
            with dask.config.set(scheduler="threads", num_workers=2):
                shardpipe.to_sharded_zarr(
                    source.map_blocks(_slow, dtype="uint8"),
                    url,
                    region=np.s_[0:32, 0:64, 0:64],
                    storage_options=direct,
                )
            outcomes.append(value)
        except Exception as err:
            outcomes.append(err)

    first = threading.Thread(target=update, args=(1,))
    first.start()
    deadline = time.monotonic() + 30
    while marker not in gcs_object_names(direct["endpoint_url"], bucket, marker):
        assert time.monotonic() < deadline and first.is_alive(), outcomes
        time.sleep(0.01)
    update(2)  # while the first holds the array
    first.join(60)
    conflicts = [o for o in outcomes if isinstance(o, JobConflictError)]
    assert len(conflicts) == 1 and 1 in outcomes, outcomes
    assert "\n" not in str(conflicts[0])
    stored = np.asarray(zarr.open_array(url, mode="r", storage_options=direct)[...])
    np.testing.assert_array_equal(stored, np.full_like(data, 2))  # the first's values, +1
    assert marker not in gcs_object_names(direct["endpoint_url"], bucket)


def test_missing_bucket_fails_before_writing_one_line(
    gcs_bucket: tuple[str, dict[str, Any]],
) -> None:
    _, direct = gcs_bucket
    with pytest.raises(StorageAccessError) as info:
        shardpipe.to_sharded_zarr(
            np.zeros((4, 4), "uint8"), "gs://no-such-bucket-here/x.zarr", storage_options=direct
        )
    assert "\n" not in str(info.value)
    assert "bucket 'no-such-bucket-here' does not exist" in str(info.value)


@pytest.mark.parametrize("token", ["google_default", {"no": "fields"}])
def test_credentials_that_cannot_be_loaded_fail_in_one_line(
    gcs_bucket: tuple[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch, token: Any
) -> None:
    bucket, direct = gcs_bucket
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", "/nonexistent/credentials.json")
    monkeypatch.setenv("GCE_METADATA_HOST", "127.0.0.1:1")  # no metadata server either
    options = {**direct, "token": token}
    with pytest.raises(StorageAccessError) as info:
        shardpipe.to_sharded_zarr(
            np.zeros((4, 4), "uint8"), f"gs://{bucket}/x.zarr", storage_options=options
        )
    message = str(info.value)
    assert "\n" not in message and f"GCS credentials for gs://{bucket}/x.zarr" in message
    assert "'token' in storage_options" in message
    assert gcs_object_names(direct["endpoint_url"], bucket) == []  # nothing written


def test_command_line_exit_status_for_a_missing_bucket(
    gcs_bucket: tuple[str, dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    from shardpipe.cli.exit_statuses import NO_ACCESS
    from shardpipe.cli.parser import main

    _, direct = gcs_bucket
    options = [f"{name}={json.dumps(value)}" for name, value in direct.items()]
    args = ["gs://no-such-bucket-here/x.zarr"]
    args += [a for o in options for a in ("--storage-option", o)]
    assert main(["verify", *args]) == NO_ACCESS
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not exist" in err, err


@pytest.mark.parametrize(
    ("status", "kind", "words"),
    [
        (429, TransientStorageError, "transient fault"),
        (500, TransientStorageError, "transient fault"),
        (503, TransientStorageError, "transient fault"),
        (408, TransientStorageError, "transient fault"),
        (401, StorageAccessError, "rejected the credentials"),
        (403, StorageAccessError, "access denied"),
        (400, StorageError, "the server answered HTTP 400"),
    ],
)
def test_statuses_are_classified(status: int, kind: type[StorageError], words: str) -> None:
    body = json.dumps({"error": {"code": status, "message": "said the server"}}).encode()
    found, cause, fix = faults.classify_status(
        status, body, endpoint="http://e", bucket="b", bucket_level=False
    )
    assert found is kind
    assert words in f"{cause}; {fix}" and "said the server" in cause


def test_connection_errors_are_classified() -> None:
    refused = ConnectionRefusedError(111, "Connect call failed")
    before = faults.classify_exception(refused, endpoint="http://e", reached=False)
    after = faults.classify_exception(refused, endpoint="http://e", reached=True)
    reset = faults.classify_exception(
        ConnectionResetError(104, "reset"), endpoint="e", reached=False
    )
    assert before[0] is StorageAccessError and "cannot connect to http://e" in before[1]
    assert after[0] is TransientStorageError
    assert reset[0] is TransientStorageError
