"""The storage contract (``shardpipe.testing.backends``) run against every backend.

Backends: ``LocalShardStore`` (with and without fsync), ``ZarrShardStore`` on
a ``MemoryStore`` and on a ``LocalStore`` (no parts, no in-place updates) and
``S3ShardStore`` on the moto server. On S3 every part but the last is at
least 5 MiB, because the server insists. Below the suites, tests of what only
one backend does.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import boto3
import pytest
import s3fs
import zarr
from botocore.exceptions import ClientError

from shardpipe.errors import (
    ConditionFailedError,
    PartsNotSupportedError,
    StorageAccessError,
    StorageError,
    TransientStorageError,
)
from shardpipe.storage.base import ShardStore
from shardpipe.storage.local.contained import ContainedLocalStore
from shardpipe.storage.local.store import LocalShardStore
from shardpipe.storage.s3 import faults as s3_faults
from shardpipe.storage.s3 import store as s3_store
from shardpipe.storage.s3.store import S3ShardStore
from shardpipe.storage.zarr_store import ZarrShardStore
from shardpipe.testing.backends import SHARDS, STAGING, ShardStoreTests
from shardpipe.testing.s3 import storage_options_for

MiB = 2**20


def _boto(storage_options: dict[str, Any]) -> Any:
    kw = storage_options["client_kwargs"]
    return boto3.client("s3", endpoint_url=kw["endpoint_url"], region_name=kw["region_name"])


class LocalTests(ShardStoreTests):
    fsync = True

    def make_store(self, tmp_path: Path, request: pytest.FixtureRequest) -> ShardStore:
        return LocalShardStore(tmp_path / "root", fsync=self.fsync)

    def leftovers(self, store: ShardStore) -> list[str]:
        assert isinstance(store, LocalShardStore)
        root = Path(store.root)
        return sorted(
            p.relative_to(root).as_posix()
            for p in root.rglob("*")
            if p.is_file()
            and (p.is_relative_to(root / STAGING) or p.name.endswith(".shardpipe-tmp"))
        )


class TestLocalFsync(LocalTests):
    fsync = True


class TestLocalNoFsync(LocalTests):
    fsync = False


class TestZarrMemoryStore(ShardStoreTests):
    def make_store(self, tmp_path: Path, request: pytest.FixtureRequest) -> ShardStore:
        return ZarrShardStore(zarr.storage.MemoryStore())

    def leftovers(self, store: ShardStore) -> list[str]:
        return []  # writes no parts, so nothing to leave behind


class TestZarrLocalStore(ShardStoreTests):
    def make_store(self, tmp_path: Path, request: pytest.FixtureRequest) -> ShardStore:
        return ZarrShardStore(zarr.storage.LocalStore(tmp_path / "root"))

    def leftovers(self, store: ShardStore) -> list[str]:
        assert isinstance(store, ZarrShardStore)
        assert isinstance(store.store, zarr.storage.LocalStore)
        return sorted(p.name for p in Path(store.store.root).rglob("*.partial"))


class TestZarrContainedLocalStore(TestZarrLocalStore):
    """zarr's LocalStore kept inside its root: the zarr store of every local path."""

    def make_store(self, tmp_path: Path, request: pytest.FixtureRequest) -> ShardStore:
        return ZarrShardStore(ContainedLocalStore(tmp_path / "root"))


@pytest.mark.s3
class TestS3(ShardStoreTests):
    # moto checks If-None-Match / If-Match, then writes, without a lock: in a run of
    # 1,000 races of four If-Match PUTs, two had two winners
    atomic_conditions = False

    def make_store(self, tmp_path: Path, request: pytest.FixtureRequest) -> ShardStore:
        bucket, storage_options = request.getfixturevalue("s3_bucket")
        self.client = _boto(storage_options)
        self.bucket = bucket
        return S3ShardStore(s3fs.S3FileSystem(**storage_options), f"{bucket}/root")

    def leftovers(self, store: ShardStore) -> list[str]:
        uploads = self.client.list_multipart_uploads(Bucket=self.bucket).get("Uploads", [])
        markers = self.client.list_objects_v2(Bucket=self.bucket, Prefix=f"root/{STAGING}/")
        return sorted([u["Key"] for u in uploads] + [o["Key"] for o in markers.get("Contents", [])])

    def test_delete_many_in_batches(
        self, store: ShardStore, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """More keys than one ``DeleteObjects`` takes go in several (here 2 a request)."""
        monkeypatch.setattr(s3_store, "_DELETE_BATCH", 2)
        keys = [f"arr/c/{i}" for i in range(5)]
        for key in keys:
            store.put(key, [b"x"])
        store.delete_many(keys[:4])
        assert list(store.list("arr/")) == ["arr/c/4"]


def test_refused_deletes_name_the_key_and_the_fix() -> None:
    """A key ``DeleteObjects`` could not remove is an error naming it, the count and the fix."""
    refused = [{"Key": "root/arr/c/1", "Code": "AccessDenied", "Message": "Access Denied"}]
    err = s3_faults.refused_deletes("bkt", 3, refused)
    assert isinstance(err, StorageAccessError)
    assert str(err) == (
        "S3 DeleteObjects of 3 keys failed for 1 of them, first s3://bkt/root/arr/c/1: "
        "AccessDenied (Access Denied); check that the credentials may delete objects there "
        "(s3:DeleteObject) and run the call again"
    )
    busy = s3_faults.refused_deletes("bkt", 3, [{**refused[0], "Code": "SlowDown"}])
    assert type(busy) is TransientStorageError  # tried again
    mixed = [{**refused[0], "Code": "SlowDown"}, {**refused[0], "Code": "InvalidObjectState"}]
    assert type(s3_faults.refused_deletes("bkt", 3, mixed)) is StorageError


@pytest.mark.s3
@pytest.mark.parametrize(("checksums", "requests"), [("when_supported", 1), ("when_required", 3)])
def test_delete_many_goes_one_by_one_where_no_checksum_is_sent(
    s3_bucket: tuple[str, dict[str, Any]], s3_fault_proxy: Any, checksums: str, requests: int
) -> None:
    """botocore puts a checksum on every ``DeleteObjects``: without checksums, DELETEs."""
    bucket, _ = s3_bucket
    options = storage_options_for(s3_fault_proxy.url)
    options["config_kwargs"] = {"request_checksum_calculation": checksums}
    store = S3ShardStore(s3fs.S3FileSystem(**options), f"{bucket}/plain")
    keys = [f"arr/c/{i}" for i in range(3)]
    for key in keys:
        store.put(key, [b"x"])
    before = s3_fault_proxy.counts.requests
    store.delete_many(keys)
    assert s3_fault_proxy.counts.requests - before == requests
    assert list(store.list("arr/")) == []


# -- backend specifics ---------------------------------------------------------
def test_zarr_store_refuses_parts_with_a_fix() -> None:
    store = ZarrShardStore(zarr.storage.MemoryStore())
    assert not store.supports_parts
    with pytest.raises(
        PartsNotSupportedError, match="cannot write a shard in parts; raise max_mem"
    ):
        store.begin_parts("arr/c/0", STAGING)
    assert store.cleanup(STAGING, SHARDS) == 0


@pytest.mark.s3
def test_s3_small_part_before_the_last_is_refused(
    s3_bucket: tuple[str, dict[str, Any]],
) -> None:
    bucket, storage_options = s3_bucket
    client = _boto(storage_options)

    def upload(sizes: list[int]) -> None:
        upload_id = client.create_multipart_upload(Bucket=bucket, Key="k")["UploadId"]
        parts = []
        for number, n in enumerate(sizes, start=1):
            body = b"x" * n
            etag = client.upload_part(
                Bucket=bucket, Key="k", UploadId=upload_id, PartNumber=number, Body=body
            )["ETag"]
            parts.append({"PartNumber": number, "ETag": etag})
        try:
            client.complete_multipart_upload(
                Bucket=bucket, Key="k", UploadId=upload_id, MultipartUpload={"Parts": parts}
            )
        except ClientError:
            client.abort_multipart_upload(Bucket=bucket, Key="k", UploadId=upload_id)
            raise

    with pytest.raises(ClientError, match="EntityTooSmall"):
        upload([5 * MiB - 1, 10])  # the server itself refuses
    upload([5 * MiB, 10])  # a small last part is fine

    store = S3ShardStore(s3fs.S3FileSystem(**storage_options), bucket)
    assert store.min_part_size == 5 * MiB
    handle = store.begin_parts("arr/c/0", STAGING)
    receipts = [store.write_part(handle, i, [b"x" * 10]) for i in range(2)]
    with pytest.raises(ValueError, match=r"5242880 bytes in every part but the last of 'arr/c/0'"):
        store.finish_parts(handle, receipts, b"", b"")
    with pytest.raises(ValueError, match="every part but the last"):
        store.finish_parts(handle, receipts[:1], b"", b"index")  # the tail is the last part
    store.abort_parts(handle)

    # copied parts are held to the same rule
    store.put("source", [b"y" * (5 * MiB + 10)])
    handle = store.begin_parts("arr/c/1", STAGING)
    small = store.copy_part(handle, 0, "source", 0, 10)
    large = store.copy_part(handle, 1, "source", 10, 5 * MiB + 10)
    with pytest.raises(ValueError, match=r"part 0 of 2 .* has 10"):
        store.finish_parts(handle, [small, large], b"", b"")
    store.finish_parts(handle, [large, store.copy_part(handle, 2, "source", 0, 10)], b"", b"")
    assert store.get("arr/c/1") == b"y" * (5 * MiB + 10)


@pytest.mark.s3
def test_s3_root_prefix_faults_and_cleanup_scope(s3_bucket: tuple[str, dict[str, Any]]) -> None:
    bucket, storage_options = s3_bucket
    client = _boto(storage_options)
    client.put_object(Bucket=bucket, Key="outside", Body=b"not ours")
    store = S3ShardStore(s3fs.S3FileSystem(**storage_options), f"s3://{bucket}/root/")
    store._page_size = 2  # page through list_objects_v2
    keys = [f"arr/c/{i}" for i in range(5)]
    for key in keys:
        store.put(key, [key.encode()])
    assert sorted(store.list("")) == keys
    assert client.get_object(Bucket=bucket, Key="root/arr/c/3")["Body"].read() == b"arr/c/3"

    mine = store.begin_parts("arr/c/9", STAGING)
    other = store.begin_parts("arr/c/8", "arr/.shardpipe/staging/another-write")
    assert store.cleanup(STAGING, SHARDS) == 2  # our upload and its marker, not the other's
    uploads = client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
    assert [u["UploadId"] for u in uploads] == [other.upload]
    store.abort_parts(other)

    # a part for the aborted upload: NoSuchUpload on AWS, an Internal Server Error on
    # moto, which botocore retries (hence no retries here, to stay fast)
    no_retries = {"retries": {"max_attempts": 1, "mode": "standard"}}
    fs = s3fs.S3FileSystem(**storage_options, config_kwargs=no_retries)
    with pytest.raises(StorageError, match=r"upload_part of s3://.*/root/arr/c/9 failed") as e:
        S3ShardStore(fs, f"{bucket}/root", fs_retries=1).write_part(mine, 0, [b"x"])
    assert "500" in str(e.value) or "NoSuchUpload" in str(e.value), str(e.value)
    missing = S3ShardStore(s3fs.S3FileSystem(**storage_options), "no-such-bucket-here")
    with pytest.raises(StorageError, match="no-such-bucket-here/arr/c/0"):
        missing.put("arr/c/0", [b"x"])


@pytest.mark.s3
def test_s3_conditions_are_enforced_by_the_server(s3_bucket: tuple[str, dict[str, Any]]) -> None:
    """The 412s come from the server itself: a second client's write is refused too."""
    bucket, storage_options = s3_bucket
    store = S3ShardStore(s3fs.S3FileSystem(**storage_options), bucket)
    store.put("k", [b"v1"])
    etag = store.version("k")
    _boto(storage_options).put_object(Bucket=bucket, Key="k", Body=b"v2 by another client")
    with pytest.raises(ConditionFailedError, match=r"expected version .* found version") as e1:
        store.put("k", [b"v3"], if_version=etag)
    with pytest.raises(ConditionFailedError, match="expected no object") as e2:
        store.put("k", [b"v3"], if_absent=True)
    assert store.get("k") == b"v2 by another client"
    assert _server_code(e1.value) == _server_code(e2.value) == "PreconditionFailed"


def _server_code(err: BaseException) -> str | None:
    """The S3 error code the server answered with, found down the exception chain."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, ClientError):
            return str(seen.response["Error"]["Code"])
        seen = seen.__cause__
    return None


@pytest.mark.s3
def test_s3_completion_sends_the_conditions(
    s3_bucket: tuple[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """If-None-Match and If-Match reach CompleteMultipartUpload (AWS enforces both).

    moto enforces only If-None-Match there, so a stale If-Match is also caught
    by the version check before completing (the suite's conditional tests).
    """
    bucket, storage_options = s3_bucket
    fs = s3fs.S3FileSystem(**storage_options)
    store = S3ShardStore(fs, bucket)
    sent: list[tuple[str, dict[str, Any]]] = []
    call_s3 = fs.call_s3

    def recording(method: str, *args: Any, **kwargs: Any) -> Any:
        sent.append((method, kwargs))
        return call_s3(method, *args, **kwargs)

    monkeypatch.setattr(fs, "call_s3", recording)

    def publish(key: str, **condition: Any) -> dict[str, Any]:
        handle = store.begin_parts(key, STAGING)
        receipt = store.write_part(handle, 0, [b"part"])
        store.finish_parts(handle, [receipt], b"", b"", **condition)
        return [kw for method, kw in sent if method == "complete_multipart_upload"][-1]

    assert publish("k", if_absent=True)["IfNoneMatch"] == "*"
    etag = store.version("k")
    assert publish("k", if_version=etag)["IfMatch"] == etag
    assert "IfMatch" not in publish("k") and "IfNoneMatch" not in publish("k")

    # a key created by another client after begin_parts: refused by the server itself
    handle = store.begin_parts("new", STAGING)
    receipt = store.write_part(handle, 0, [b"mine"])
    _boto(storage_options).put_object(Bucket=bucket, Key="new", Body=b"theirs")
    with pytest.raises(ConditionFailedError, match="expected no object"):
        store.finish_parts(handle, [receipt], b"", b"", if_absent=True)
    assert store.get("new") == b"theirs"
    store.abort_parts(handle)


# -- local file systems --------------------------------------------------------
def test_local_versions_stamp_their_own_times(tmp_path: Path) -> None:
    """Every write sets a new nanosecond mtime, so versions differ even within a clock tick.

    File systems reuse the inode numbers of replaced files, and kernel
    timestamps may tick only every few milliseconds.
    """
    store = LocalShardStore(tmp_path, fsync=False)
    versions = []
    for i in range(20):
        store.put("k", [b"%02d" % i])  # same size every time
        versions.append(store.version("k"))
    for i in range(20):
        store.write_at("k", 0, [b"%02d" % i])
        versions.append(store.version("k"))
    assert len(set(versions)) == len(versions)
    mtimes = [int(v.rsplit(":", 1)[1]) for v in versions if v is not None]
    assert mtimes == sorted(mtimes)


def test_local_cleanup_finds_temporaries_beside_any_key_encoding(tmp_path: Path) -> None:
    store = LocalShardStore(tmp_path, fsync=False)
    store.put("arr/zarr.json", [b"{}"])
    store.put("arr/c.0.1", [b"shard"])  # "." separator: shards beside zarr.json
    leftovers = [
        "arr/c/0/.1.abc.shardpipe-tmp",
        "arr/.c.0.0.abc.shardpipe-tmp",
        "arr/.0.0.abc.shardpipe-tmp",  # v2 key encoding
    ]
    for key in leftovers:
        os.makedirs(tmp_path / os.path.dirname(key), exist_ok=True)
        (tmp_path / key).write_bytes(b"torn")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / ".x.abc.shardpipe-tmp").write_bytes(b"another array's")
    assert store.cleanup(STAGING, SHARDS) == 3
    assert sorted(store.list("")) == ["arr/c.0.1", "arr/zarr.json", "other/.x.abc.shardpipe-tmp"]


def test_local_create_only_publish_is_a_link(tmp_path: Path) -> None:
    """The temporary file is linked to the key, then removed: no temporaries, one link."""
    store = LocalShardStore(tmp_path)
    store.put("arr/c/0", [b"first"], if_absent=True)
    assert os.stat(tmp_path / "arr/c/0").st_nlink == 1
    assert os.listdir(tmp_path / "arr/c") == ["0"]
    with pytest.raises(ConditionFailedError, match=r"expected no object .* found version"):
        store.put("arr/c/0", [b"second"], if_absent=True)
    assert os.listdir(tmp_path / "arr/c") == ["0"]


def test_zarr_store_without_atomic_create_declares_it() -> None:
    class CheckThenSet(zarr.storage.MemoryStore):
        set_if_not_exists = zarr.abc.store.Store.set_if_not_exists

    assert ZarrShardStore(zarr.storage.MemoryStore()).abilities.create_only
    plain = ZarrShardStore(CheckThenSet())
    assert not plain.abilities.create_only
    assert ZarrShardStore.abilities.create_only  # the class keeps its declaration
    wrapped = ZarrShardStore(zarr.storage.LoggingStore(CheckThenSet()))
    assert not wrapped.abilities.create_only
    plain.put("k", [b"one"], if_absent=True)  # still checked, just not atomically
    with pytest.raises(ConditionFailedError):
        plain.put("k", [b"two"], if_absent=True)
    assert plain.get("k") == b"one"
