"""S3 writes through a TCP proxy that resets, drops and stalls requests (moto behind it).

After every write the invariant is checked against the server directly (not
through the proxy): either the array reads back equal to the source and
``verify`` is clean, or the write raised a one-line ``StorageError``; and in
both cases no multipart upload is open and nothing is left under the
staging prefix (after ``shardpipe.cleanup`` for a failed write).
"""

from __future__ import annotations

import base64
import http.server
import json
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import boto3
import crc32c
import dask
import dask.array as da
import numpy as np
import pytest
import s3fs
import zarr

import shardpipe
from shardpipe.errors import StorageAccessError, StorageError, TransientStorageError
from shardpipe.testing.fault_proxy import FaultProxy
from shardpipe.testing.s3 import storage_options_for

pytestmark = pytest.mark.s3

SHAPE = (16, 1024, 1024)
"""16 MiB of uint8: two shards of 8 MiB, each written as two parts under MAX_MEM."""
SHARDS = (16, 1024, 512)
CHUNKS = (8, 128, 128)
MAX_MEM = "20MB"
TIMEOUTS = {"connect_timeout": 1, "read_timeout": 1.5}
"""Client timeouts through the proxy: short, so that stalls and drops cost seconds."""
FAST_RETRIES = {
    "shardpipe.retry.first-delay": 0.05,
    "shardpipe.retry.max-delay": 0.5,
}


def _source(seed: int = 5) -> tuple[da.Array, np.ndarray]:
    source = da.random.default_rng(seed).integers(0, 250, SHAPE, chunks=(8, 256, 256))
    source = source.astype("uint8")
    return source, source.compute(scheduler="threads")


def _proxied(proxy: FaultProxy, **config: Any) -> dict[str, Any]:
    options = storage_options_for(proxy.url)
    options["config_kwargs"] = {**TIMEOUTS, **config}
    return options


def _client(options: dict[str, Any]) -> Any:
    kw = options["client_kwargs"]
    return boto3.client(
        "s3",
        endpoint_url=kw["endpoint_url"],
        region_name=kw["region_name"],
        aws_access_key_id=options["key"],
        aws_secret_access_key=options["secret"],
    )


def _open_uploads(bucket: str, options: dict[str, Any]) -> list[str]:
    uploads = _client(options).list_multipart_uploads(Bucket=bucket).get("Uploads", [])
    return [f"{u['Key']} {u['UploadId']}" for u in uploads]


def _objects(bucket: str, options: dict[str, Any]) -> list[str]:
    pages = _client(options).get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return [obj["Key"] for page in pages for obj in page.get("Contents", [])]


def _write(source: da.Array, url: str, options: dict[str, Any]) -> None:
    with dask.config.set(FAST_RETRIES, scheduler="threads", num_workers=4):
        shardpipe.to_sharded_zarr(
            source, url, shards=SHARDS, chunks=CHUNKS, max_mem=MAX_MEM, storage_options=options
        )


def _check_outcome(
    bucket: str, url: str, direct: dict[str, Any], data: np.ndarray, error: BaseException | None
) -> None:
    """The invariant: equal and verified, or a clear StorageError; nothing left behind."""
    if error is None:
        stored = np.asarray(zarr.open_array(url, mode="r", storage_options=direct)[...])
        np.testing.assert_array_equal(stored, data)
        report = shardpipe.verify(url, storage_options=direct)
        assert report.ok, str(report)
    else:
        assert isinstance(error, StorageError), repr(error)
        assert "\n" not in str(error), str(error)
        # the failed write removed its own uploads and staging (checked below), and
        # every shard it published is whole
        assert shardpipe.verify(url, storage_options=direct).ok
    assert _open_uploads(bucket, direct) == []
    assert [k for k in _objects(bucket, direct) if ".shardpipe/staging" in k] == []


# -- a share of every kind of fault ------------------------------------------------
NETWORK: Counter[str] = Counter()
"""What the mixed-fault writes met and how they ended (printed with ``pytest -s``)."""


@pytest.fixture(scope="module", autouse=True)
def _print_network_faults() -> Iterator[None]:
    yield
    print(f"\nnetwork faults injected by {__name__}: {dict(sorted(NETWORK.items()))}")


@pytest.mark.parametrize("seed", range(4))
def test_writes_survive_a_share_of_network_faults(
    s3_bucket: tuple[str, dict[str, Any]], s3_fault_proxy: FaultProxy, seed: int
) -> None:
    """About 16% of requests reset before or after the server saw them, dropped or stalled."""
    bucket, direct = s3_bucket
    proxy = s3_fault_proxy
    proxy.stall_seconds = 2.5  # longer than the read timeout: the client gives up and retries
    proxy.drop_seconds = 3  # in case the client's read timeout does not fire (see below)
    source, data = _source(seed)
    url = f"s3://{bucket}/x.zarr"
    proxy._rng.seed(seed)
    proxy.configure(reset_before=0.05, reset_after=0.05, drop=0.03, stall=0.03)
    started = time.monotonic()
    error: BaseException | None = None
    try:
        _write(source, url, _proxied(proxy))
    except Exception as err:
        error = err
    elapsed = time.monotonic() - started
    proxy.configure()
    counts = proxy.counts
    assert counts.faults > 0, counts
    _check_outcome(bucket, url, direct, data, error)
    assert error is None, f"the retries did not carry the write through: {error}"
    NETWORK.update(
        writes=1,
        requests=counts.requests,
        reset_before=counts.reset_before,
        reset_after=counts.reset_after,
        dropped=counts.drop,
        stalled=counts.stall,
        verified=error is None,
        clear_error=error is not None,
    )
    assert elapsed < 60, (elapsed, counts)


# -- single faults at the worst moments ------------------------------------------
def test_lost_create_response_leaks_no_upload(
    s3_bucket: tuple[str, dict[str, Any]], s3_fault_proxy: FaultProxy
) -> None:
    """CreateMultipartUpload done by the server, its answer lost: the client's retry
    makes a second upload; the first must not be left open."""
    bucket, direct = s3_bucket
    proxy = s3_fault_proxy
    source, data = _source()
    url = f"s3://{bucket}/x.zarr"
    proxy.add_rule("reset_after", b"?uploads HTTP", method=b"POST", count=2)
    _write(source, url, _proxied(proxy))
    assert proxy.counts.reset_after == 2
    assert proxy.pending_rules() == []
    _check_outcome(bucket, url, direct, data, None)


def test_lost_complete_response_is_success(
    s3_bucket: tuple[str, dict[str, Any]],
    s3_fault_proxy: FaultProxy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CompleteMultipartUpload done by the server, its answer lost (and no client retry to
    hide it): the shard is recognised as published by its multipart ETag.

    botocore does not retry, so the lost answer is not resent. shardpipe's own retries
    and the default timeouts stay on, so that a slow request elsewhere on a busy machine
    cannot fail the test (with one attempt and 1.5 s timeouts, it once did). Because a
    shard whose completion went unrecognised would then be published again by that
    retry, the recognitions are counted instead.
    """
    from shardpipe.storage.s3 import multipart

    bucket, direct = s3_bucket
    proxy = s3_fault_proxy
    source, data = _source()
    url = f"s3://{bucket}/x.zarr"
    recognised: list[bool] = []
    completed = multipart._completed

    def spied(*args: Any, **kwargs: Any) -> bool:
        recognised.append(completed(*args, **kwargs))
        return recognised[-1]

    monkeypatch.setattr(multipart, "_completed", spied)
    proxy.add_rule("reset_after", b"?uploadId=", method=b"POST", count=2)
    options = storage_options_for(proxy.url)
    options["config_kwargs"] = {"retries": {"total_max_attempts": 1, "mode": "standard"}}
    _write(source, url, options)
    assert proxy.counts.reset_after == 2
    assert recognised == [True, True]
    _check_outcome(bucket, url, direct, data, None)


def test_lost_conditional_put_response_is_no_conflict(
    s3_bucket: tuple[str, dict[str, Any]], s3_fault_proxy: FaultProxy
) -> None:
    """The job marker is a create-only PUT: when its answer is lost and the client
    resends it, the write must not take its own marker for another job's."""
    bucket, direct = s3_bucket
    proxy = s3_fault_proxy
    source, data = _source()
    url = f"s3://{bucket}/x.zarr"
    proxy.add_rule("reset_after", b"/.shardpipe/job.json", method=b"PUT")
    _write(source, url, _proxied(proxy))
    assert proxy.counts.reset_after == 1
    _check_outcome(bucket, url, direct, data, None)


@pytest.mark.parametrize("condition", ["if_absent", "if_version"])
def test_conditional_put_whose_answer_was_lost_succeeds(
    s3_bucket: tuple[str, dict[str, Any]], s3_fault_proxy: FaultProxy, condition: str
) -> None:
    """The client resends a conditional PUT that landed: its own object is recognised,
    while the same bytes put by someone else are still refused."""
    import s3fs

    from shardpipe.errors import ConditionFailedError
    from shardpipe.storage.s3.store import S3ShardStore

    bucket, _ = s3_bucket
    proxy = s3_fault_proxy
    store = S3ShardStore(s3fs.S3FileSystem(**_proxied(proxy)), bucket)
    kwargs: dict[str, Any] = {"if_absent": True}
    if condition == "if_version":
        store.put("k", [b"old"])
        kwargs = {"if_version": store.version("k")}
    proxy.add_rule("reset_after", b"/k HTTP", method=b"PUT")
    store.put("k", [b"mine"], **kwargs)
    assert proxy.counts.reset_after == 1
    assert store.get("k") == b"mine"
    with pytest.raises(ConditionFailedError):
        store.put("k", [b"mine"], if_absent=True)


def test_failed_write_after_lost_create_leaves_nothing(
    s3_bucket: tuple[str, dict[str, Any]], s3_fault_proxy: FaultProxy
) -> None:
    """Uploads whose ids were never heard of are aborted when the write fails later."""
    bucket, direct = s3_bucket
    proxy = s3_fault_proxy
    source, data = _source()
    url = f"s3://{bucket}/x.zarr"
    proxy.add_rule("reset_after", b"?uploads HTTP", method=b"POST", count=2)
    proxy.add_rule("reset_before", b"partNumber=", method=b"PUT", count=1000)
    options = _proxied(proxy, retries={"total_max_attempts": 2, "mode": "standard"})
    with (
        dask.config.set({"shardpipe.retry.attempts": 2}),
        pytest.raises(TransientStorageError) as failed,
    ):
        _write(source, url, options)
    assert proxy.counts.reset_after == 2
    # the write cleaned up after itself (no shardpipe.cleanup needed)
    assert _open_uploads(bucket, direct) == []
    assert [k for k in _objects(bucket, direct) if ".shardpipe/staging" in k] == []
    _check_outcome(bucket, url, direct, data, failed.value)


def test_silent_server_fails_within_bounded_time(
    s3_bucket: tuple[str, dict[str, Any]], s3_fault_proxy: FaultProxy
) -> None:
    """Part uploads never answered: timeouts and retries add up to seconds, not minutes,
    and the error is transient, one line, naming the key."""
    bucket, direct = s3_bucket
    proxy = s3_fault_proxy
    source, data = _source()
    url = f"s3://{bucket}/x.zarr"
    proxy.configure(drop=1.0, match=b"partNumber=")
    # aiohttp's read timeout does not always fire after an "Expect: 100-continue"
    # request is answered with silence (waits of 20 s seen): the proxy gives up first
    proxy.drop_seconds = 3
    started = time.monotonic()
    with (
        dask.config.set({"shardpipe.retry.attempts": 2}),
        pytest.raises(TransientStorageError, match=r"x\.zarr/c/0/0/[01]") as failed,
    ):
        _write(source, url, _proxied(proxy))
    elapsed = time.monotonic() - started
    assert proxy.counts.drop > 0
    # 2 shardpipe tries x 3 botocore attempts x 1.5-3 s, plus backoff
    assert elapsed < 30, elapsed
    proxy.configure()
    _check_outcome(bucket, url, direct, data, failed.value)


# -- clear failures at the edges -----------------------------------------------------
def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def not_s3_server() -> Iterator[str]:
    """An HTTP server that is not S3 (Python's own), on 127.0.0.1; yields its URL."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _one_line_access_error(call: Any, *, match: str, within: float = 15.0) -> StorageAccessError:
    started = time.monotonic()
    with pytest.raises(StorageAccessError, match=match) as raised:
        call()
    assert time.monotonic() - started < within
    message = str(raised.value)
    assert "\n" not in message and len(message) < 600, message
    assert raised.value.__cause__ is not None
    return raised.value


def test_no_credentials_is_one_line_and_writes_nothing(
    s3_bucket: tuple[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket, direct = s3_bucket
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("AWS_SECURITY_TOKEN", raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/config")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    options = {k: v for k, v in direct.items() if k not in ("key", "secret")}
    source, _ = _source()
    url = f"s3://{bucket}/x.zarr"
    err = _one_line_access_error(
        lambda: _write(source, url, options), match="no usable AWS credentials"
    )
    assert "AWS_ACCESS_KEY_ID" in str(err) and "storage_options" in str(err)
    assert f"s3://{bucket}/x.zarr/" in str(err)
    assert _objects(bucket, direct) == []
    _one_line_access_error(
        lambda: shardpipe.verify(url, storage_options=options), match="credentials"
    )


@pytest.mark.parametrize("endpoint", ["closed port", "not S3"])
def test_wrong_endpoint_is_one_line(
    s3_bucket: tuple[str, dict[str, Any]], not_s3_server: str, endpoint: str
) -> None:
    bucket, direct = s3_bucket
    url = not_s3_server if endpoint == "not S3" else f"http://127.0.0.1:{_free_port()}"
    options = storage_options_for(url)
    source, _ = _source()
    target = f"s3://{bucket}/x.zarr"
    expected = "does not speak S3" if endpoint == "not S3" else "cannot connect to"
    err = _one_line_access_error(lambda: _write(source, target, options), match=expected)
    assert "endpoint_url" in str(err)
    # verify and cleanup open the store the same way (verify used to end in a
    # ContextVar error after a 216-line traceback)
    _one_line_access_error(
        lambda: shardpipe.verify(target, storage_options=options), match=expected
    )
    _one_line_access_error(
        lambda: shardpipe.cleanup(target, storage_options=options), match=expected
    )
    assert _objects(bucket, direct) == []


def test_missing_bucket_is_one_line(s3_bucket: tuple[str, dict[str, Any]]) -> None:
    bucket, direct = s3_bucket
    source, _ = _source()
    _one_line_access_error(
        lambda: _write(source, f"s3://{bucket}-absent/x.zarr", direct),
        match=rf"bucket '{bucket}-absent' does not exist at http://127\.0\.0\.1:\d+; create it",
    )


def test_default_timeouts_and_retries_can_be_overridden(
    s3_bucket: tuple[str, dict[str, Any]],
) -> None:
    """shardpipe's S3 file system takes the defaults unless config_kwargs say otherwise."""
    from shardpipe.storage.resolve import resolve_store
    from shardpipe.storage.s3.config import DEFAULT_CONFIG, S3FS_RETRIES
    from shardpipe.storage.s3.store import S3ShardStore

    bucket, direct = s3_bucket

    def backend(options: dict[str, Any]) -> S3ShardStore:
        shards = resolve_store(f"s3://{bucket}/x.zarr", None, options).shards
        inner = getattr(shards, "inner", shards)
        assert isinstance(inner, S3ShardStore)
        return inner

    plain = backend(direct)
    assert plain.fs.config_kwargs == DEFAULT_CONFIG
    assert plain.fs.retries == S3FS_RETRIES
    assert plain.reached  # the check on resolving reached the server
    mine = {"read_timeout": 99, "retries": {"max_attempts": 7, "mode": "adaptive"}}
    custom = backend({**direct, "config_kwargs": mine})
    assert custom.fs.config_kwargs == {**DEFAULT_CONFIG, **mine}
    # what workers unpickle keeps the settings (s3fs does not pickle its retry count)
    import pickle

    copy = pickle.loads(pickle.dumps(custom))
    assert copy.fs.retries == S3FS_RETRIES
    assert copy.fs.config_kwargs == custom.fs.config_kwargs
    assert copy.reached


def test_command_line_exit_status_without_credentials(
    s3_bucket: tuple[str, dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from shardpipe.cli.exit_statuses import NO_ACCESS
    from shardpipe.cli.parser import main

    bucket, direct = s3_bucket
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/config")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    options = [
        f"{name}={json.dumps(value)}"
        for name, value in direct.items()
        if name not in ("key", "secret")
    ]
    args = [f"s3://{bucket}/x.zarr", *(a for o in options for a in ("--storage-option", o))]
    assert main(["verify", *args]) == NO_ACCESS
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "credentials" in err


def test_begin_shard_run_again_keeps_the_parts_already_written(
    s3_bucket: tuple[str, dict[str, Any]],
) -> None:
    """Dask runs begin-shard again when the worker holding its result dies, while the
    parts other tasks wrote into its upload are still in use: the upload must stay."""
    from shardpipe.storage.s3.store import S3ShardStore

    bucket, direct = s3_bucket
    store = S3ShardStore(s3fs.S3FileSystem(**direct), bucket)
    staging = "a.zarr/.shardpipe/staging/job-1"
    first = store.begin_parts("a.zarr/c/0", staging)
    part = bytes(range(256)) * (5 * 4096 + 1)  # over 5 MiB
    receipt = store.write_part(first, 0, [part])
    again = store.begin_parts("a.zarr/c/0", staging)  # the task, run a second time
    assert again.upload == first.upload
    store.finish_parts(again, [receipt], b"", b"tail")
    assert store.get("a.zarr/c/0") == part + b"tail"
    assert _open_uploads(bucket, direct) == []
    other = store.begin_parts("a.zarr/c/0", "a.zarr/.shardpipe/staging/job-2")
    assert other.upload != first.upload  # another write starts its own upload
    store.abort_parts(other)


def test_shards_carry_a_checksum_and_go_unhashed_into_the_signature(
    s3_bucket: tuple[str, dict[str, Any]],
) -> None:
    """Each shard arrives with the CRC32C S3 verifies; its body is not hashed again for SigV4.

    On plain HTTP botocore would hash every body into the signature (about as
    much CPU as encoding the shards); shardpipe's default turns that off and
    keeps the checksum, as botocore itself does on HTTPS.
    """
    from shardpipe.storage.resolve import resolve_store

    bucket, direct = s3_bucket
    signatures: list[bytes] = []

    def seen(request: Any, **_: Any) -> None:
        if request.method == "PUT":
            signatures.append(request.headers.get("X-Amz-Content-SHA256", b""))

    resolved = resolve_store(f"s3://{bucket}/x.zarr", None, direct)
    inner = getattr(resolved.shards, "inner", resolved.shards)
    # the backend's own client (made when the store was resolved): watch what it sends
    inner.fs.s3.meta.events.register("before-send.s3.PutObject", seen)
    shardpipe.to_sharded_zarr(
        da.ones((8, 8), dtype="u1", chunks=4), resolved, shards=(4, 8), chunks=(4, 4)
    )
    assert signatures and set(signatures) == {b"UNSIGNED-PAYLOAD"}
    client = boto3.client("s3", **direct["client_kwargs"])
    head = client.head_object(Bucket=bucket, Key="x.zarr/c/0/0", ChecksumMode="ENABLED")
    stored = client.get_object(Bucket=bucket, Key="x.zarr/c/0/0")["Body"].read()
    expected = base64.b64encode(crc32c.crc32c(stored).to_bytes(4, "big")).decode()
    assert head.get("ChecksumCRC32C") == expected  # computed by shardpipe, kept by the store


def test_no_checksum_where_botocore_is_told_when_required(
    s3_bucket: tuple[str, dict[str, Any]],
) -> None:
    """S3-compatible stores that refuse checksum headers are written with
    ``request_checksum_calculation="when_required"``: shardpipe then sends none either."""
    from shardpipe.storage.resolve import resolve_store

    bucket, direct = s3_bucket
    headers: list[dict[str, Any]] = []

    def seen(request: Any, **_: Any) -> None:
        if request.method == "PUT":
            headers.append({k.lower(): v for k, v in request.headers.items()})

    config = {**direct.get("config_kwargs", {}), "request_checksum_calculation": "when_required"}
    options = {**direct, "config_kwargs": config}
    resolved = resolve_store(f"s3://{bucket}/plain.zarr", None, options)
    inner = getattr(resolved.shards, "inner", resolved.shards)
    inner.fs.s3.meta.events.register("before-send.s3.PutObject", seen)
    data = np.arange(64, dtype="u1").reshape(8, 8)
    shardpipe.to_sharded_zarr(data, resolved, shards=(4, 8), chunks=(4, 4))
    assert headers and not any(k.startswith("x-amz-checksum") for h in headers for k in h)
    back = zarr.open_array(f"s3://{bucket}/plain.zarr", mode="r", storage_options=direct)
    np.testing.assert_array_equal(back[...], data)
