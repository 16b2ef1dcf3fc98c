"""The storage contract (``shardpipe.testing.backends``) run against every backend.

Backends: ``LocalShardStore`` (with and without fsync), ``ZarrShardStore`` on
a ``MemoryStore`` (no parts, no in-place updates) and ``S3ShardStore`` on the
moto server. On S3 every part but the last is at least 5 MiB, because the
server insists. Below the suites, tests of what only one backend does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3
import pytest
import s3fs
import zarr
from botocore.exceptions import ClientError

from shardpipe.errors import ConditionFailedError, PartsNotSupportedError, StorageError
from shardpipe.storage.base import ShardStore
from shardpipe.storage.local import LocalShardStore
from shardpipe.storage.s3 import S3ShardStore
from shardpipe.storage.zarr_store import ZarrShardStore
from shardpipe.testing.backends import SHARDS, STAGING, ShardStoreTests

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


@pytest.mark.s3
class TestS3(ShardStoreTests):
    def make_store(self, tmp_path: Path, request: pytest.FixtureRequest) -> ShardStore:
        bucket, storage_options = request.getfixturevalue("s3_bucket")
        self.client = _boto(storage_options)
        self.bucket = bucket
        return S3ShardStore(s3fs.S3FileSystem(**storage_options), f"{bucket}/root")

    def leftovers(self, store: ShardStore) -> list[str]:
        uploads = self.client.list_multipart_uploads(Bucket=self.bucket).get("Uploads", [])
        markers = self.client.list_objects_v2(Bucket=self.bucket, Prefix=f"root/{STAGING}/")
        return sorted([u["Key"] for u in uploads] + [o["Key"] for o in markers.get("Contents", [])])


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
    other = store.begin_parts("arr/c/8", "arr/.shardpipe-staging/another-write")
    assert store.cleanup(STAGING, SHARDS) == 2  # our upload and its marker, not the other's
    uploads = client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
    assert [u["UploadId"] for u in uploads] == [other.upload]
    store.abort_parts(other)

    # a part for the aborted upload: NoSuchUpload on AWS, an Internal Server Error on
    # moto, which botocore retries (hence no retries here, to stay fast)
    no_retries = {"retries": {"max_attempts": 1, "mode": "standard"}}
    fs = s3fs.S3FileSystem(**storage_options, config_kwargs=no_retries, retries=1)
    with pytest.raises(StorageError, match=r"upload_part of s3://.*/root/arr/c/9 failed"):
        S3ShardStore(fs, f"{bucket}/root").write_part(mine, 0, [b"x"])
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
    with pytest.raises(ConditionFailedError, match=r"If"):
        store.put("k", [b"v3"], if_version=etag)
    with pytest.raises(ConditionFailedError):
        store.put("k", [b"v3"], if_absent=True)
    assert store.get("k") == b"v2 by another client"
