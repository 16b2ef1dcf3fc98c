"""One contract test suite run against every storage backend.

Backends: ``LocalShardStore`` (with and without fsync), ``ZarrShardStore`` on
a ``MemoryStore`` (no parts) and ``S3ShardStore`` on the moto server. On S3
every part but the last is at least 5 MiB, because the server insists.
"""

from __future__ import annotations

import os
import pickle
import random
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
import s3fs
import zarr
from botocore.exceptions import ClientError

from shardpipe.storage.base import (
    PartReceipt,
    PartsHandle,
    PartsNotSupportedError,
    ShardStore,
    StorageError,
)
from shardpipe.storage.local import LocalShardStore
from shardpipe.storage.s3 import S3ShardStore
from shardpipe.storage.zarr_store import ZarrShardStore

MiB = 2**20
STAGING = "arr/.shardpipe-staging/run1"
SHARDS = "arr/c"

ALL_BACKENDS = [
    "local-fsync",
    "local-nofsync",
    "zarr-memory",
    pytest.param("s3", marks=pytest.mark.s3),
]
PARTS_BACKENDS = [p for p in ALL_BACKENDS if p != "zarr-memory"]


@dataclass
class Backend:
    """A store under test and a way to see what unfinished writes left behind."""

    name: str
    store: ShardStore
    # open multipart uploads (S3) or staging / temporary files (local), sorted
    leftovers: Callable[[], list[str]]

    @property
    def part_size(self) -> int:
        """Size of a part that is allowed anywhere in a shard."""
        return max(self.store.min_part_size, 64 * 1024)


def _boto(storage_options: dict[str, Any]) -> Any:
    kw = storage_options["client_kwargs"]
    return boto3.client("s3", endpoint_url=kw["endpoint_url"], region_name=kw["region_name"])


def _make_backend(name: str, request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if name.startswith("local"):
        local = LocalShardStore(tmp_path / "root", fsync=name == "local-fsync")

        def local_leftovers() -> list[str]:
            root = Path(local.root)
            return sorted(
                p.relative_to(root).as_posix()
                for p in root.rglob("*")
                if p.is_file()
                and (p.is_relative_to(root / STAGING) or p.name.endswith(".shardpipe-tmp"))
            )

        return Backend(name, local, local_leftovers)
    if name == "zarr-memory":
        return Backend(name, ZarrShardStore(zarr.storage.MemoryStore()), list)
    assert name == "s3"
    bucket, storage_options = request.getfixturevalue("s3_bucket")
    store = S3ShardStore(s3fs.S3FileSystem(**storage_options), f"{bucket}/root")
    client = _boto(storage_options)

    def s3_leftovers() -> list[str]:
        uploads = client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
        markers = client.list_objects_v2(Bucket=bucket, Prefix=f"root/{STAGING}/")
        return sorted([u["Key"] for u in uploads] + [o["Key"] for o in markers.get("Contents", [])])

    return Backend(name, store, s3_leftovers)


@pytest.fixture(params=ALL_BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """Every backend."""
    return _make_backend(request.param, request, tmp_path)


@pytest.fixture(params=PARTS_BACKENDS)
def parts_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """Every backend that writes shards in parts."""
    return _make_backend(request.param, request, tmp_path)


def _data(n: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(n)


def _split(data: bytes) -> list[Any]:
    """Hand a part over as several buffers of different types."""
    half = len(data) // 2
    return [memoryview(data)[:half], bytearray(data[half:])]


# -- whole objects -----------------------------------------------------------
def test_put_get_size_delete(backend: Backend) -> None:
    store = backend.store
    assert store.get("arr/c/0/0") is None
    assert store.size("arr/c/0/0") is None
    store.put("arr/c/0/0", [b"abc", bytearray(b"def"), memoryview(b"gh")])
    assert store.get("arr/c/0/0") == b"abcdefgh"
    assert store.size("arr/c/0/0") == 8
    store.put("arr/c/0/0", [b""])
    assert store.get("arr/c/0/0") == b""
    assert store.size("arr/c/0/0") == 0
    store.delete("arr/c/0/0")
    assert store.get("arr/c/0/0") is None
    assert store.size("arr/c/0/0") is None
    store.delete("arr/c/0/0")  # absent: no error


def test_get_range(backend: Backend) -> None:
    data = _data(100_000, seed=1)
    backend.store.put("arr/c/1", [data])
    for start, stop in [(0, 10), (10, 20_000), (99_990, 100_000), (0, 100_000), (5, 5)]:
        assert backend.store.get_range("arr/c/1", start, stop) == data[start:stop]
    with pytest.raises(FileNotFoundError):
        backend.store.get_range("arr/c/absent", 0, 4)


def test_list(backend: Backend) -> None:
    keys = ["arr/c/0/0", "arr/c/0/1", "arr/c/1/0", "arr/zarr.json", "other/c/0"]
    for key in keys:
        backend.store.put(key, [key.encode()])
    assert sorted(backend.store.list("arr/c")) == keys[:3]
    assert sorted(backend.store.list("arr")) == keys[:4]
    assert sorted(backend.store.list("")) == keys
    assert list(backend.store.list("missing")) == []


def test_put_replaces_atomically(backend: Backend) -> None:
    """Readers racing a writer see the old object or the new one, never a mix."""
    old, new = b"a" * MiB, b"b" * (MiB + MiB // 2)
    store = backend.store
    store.put("arr/c/0", [old])
    stop = threading.Event()

    def write() -> None:
        try:
            for i in range(30):
                store.put("arr/c/0", [new if i % 2 == 0 else old])
        finally:
            stop.set()

    def read() -> int:
        reads = 0
        while not stop.is_set() or reads == 0:
            assert store.get("arr/c/0") in (old, new)
            reads += 1
        return reads

    with ThreadPoolExecutor(3) as pool:
        readers = [pool.submit(read) for _ in range(2)]
        pool.submit(write).result()
        assert all(r.result() > 0 for r in readers)


# -- parts ---------------------------------------------------------------------
@pytest.mark.parametrize("index_location", ["start", "end"])
def test_parts_out_of_order_from_threads(parts_backend: Backend, index_location: str) -> None:
    store, size = parts_backend.store, parts_backend.part_size
    index = _data(100, seed=99)
    # with the index at the end the tail is last: on S3 every part then needs 5 MiB
    sizes = [size, size, size if index_location == "end" else 1000]
    parts = [_data(n, seed=i) for i, n in enumerate(sizes)]
    head = index.ljust(store.head_size(len(index)), b"\0") if index_location == "start" else b""
    tail = index if index_location == "end" else b""

    assert store.supports_parts
    handle = store.begin_parts("arr/c/0/0", STAGING)
    assert store.get("arr/c/0/0") is None
    with ThreadPoolExecutor(3) as pool:
        futures = [pool.submit(store.write_part, handle, i, _split(parts[i])) for i in (2, 0, 1)]
        receipts = [f.result() for f in futures]
    assert sorted((r.number, r.size) for r in receipts) == list(enumerate(sizes))
    assert store.get("arr/c/0/0") is None  # nothing visible before finish_parts

    store.finish_parts(handle, receipts, head, tail)
    expected = head + b"".join(parts) + tail
    assert store.size("arr/c/0/0") == len(expected)
    assert store.get("arr/c/0/0") == expected
    assert parts_backend.leftovers() == []


def test_retried_write_part_replaces(parts_backend: Backend) -> None:
    store, size = parts_backend.store, parts_backend.part_size
    handle = store.begin_parts("arr/c/1/0", STAGING)
    first = store.write_part(handle, 0, [_data(size, seed=1)])
    last = store.write_part(handle, 1, [b"last part"])
    retried = store.write_part(handle, 0, [_data(size, seed=2)])
    assert first.size == retried.size == size
    store.finish_parts(handle, [last, retried], b"", b"")
    assert store.get("arr/c/1/0") == _data(size, seed=2) + b"last part"


def test_abort_parts_leaves_nothing(parts_backend: Backend) -> None:
    store, size = parts_backend.store, parts_backend.part_size
    handle = store.begin_parts("arr/c/2/0", STAGING)
    store.write_part(handle, 0, [_data(size, seed=3)])
    store.write_part(handle, 1, [b"x" * 10])
    assert parts_backend.leftovers() != []
    store.abort_parts(handle)
    assert store.get("arr/c/2/0") is None
    assert parts_backend.leftovers() == []
    if isinstance(store, LocalShardStore):  # no staging folder (on S3: no open upload)
        assert not os.path.exists(os.path.join(store.root, *handle.upload.split("/")))
    store.abort_parts(handle)  # twice is fine


def test_finish_without_anything_publishes_nothing(parts_backend: Backend) -> None:
    store = parts_backend.store
    handle = store.begin_parts("arr/c/3/0", STAGING)
    store.finish_parts(handle, [], b"", b"")
    if isinstance(store, S3ShardStore):
        assert store.get("arr/c/3/0") is None  # the upload was aborted
    assert parts_backend.leftovers() == []


def test_cleanup_after_crashed_write(parts_backend: Backend) -> None:
    store, size = parts_backend.store, parts_backend.part_size
    done = store.begin_parts("arr/c/0/0", STAGING)
    receipt = store.write_part(done, 0, [b"finished shard"])
    store.finish_parts(done, [receipt], b"", b"")
    # a "crashed" write: two shards begun, some parts written, never finished
    for key, n_parts in [("arr/c/0/1", 2), ("arr/c/1/1", 1)]:
        handle = store.begin_parts(key, STAGING)
        for number in range(n_parts):
            store.write_part(handle, number, [_data(size, seed=number)])
    before = parts_backend.leftovers()
    assert before
    assert store.cleanup(STAGING, SHARDS) == len(before)
    assert parts_backend.leftovers() == []
    assert store.get("arr/c/0/1") is None
    assert store.get("arr/c/1/1") is None
    assert store.get("arr/c/0/0") == b"finished shard"
    assert store.cleanup(STAGING, SHARDS) == 0


# -- pickling ------------------------------------------------------------------
def test_pickle_round_trip(backend: Backend) -> None:
    backend.store.put("arr/c/0", [b"before"])
    copy = pickle.loads(pickle.dumps(backend.store))
    assert type(copy) is type(backend.store)
    assert copy.get("arr/c/0") == b"before"
    copy.put("arr/c/1", [b"from the copy"])
    assert copy.get("arr/c/1") == b"from the copy"


def test_pickled_stores_write_parts_of_one_shard(parts_backend: Backend) -> None:
    """Parts from unpickled copies (as on Dask workers) join one shard."""
    store, size = parts_backend.store, parts_backend.part_size
    handle = pickle.loads(pickle.dumps(store.begin_parts("arr/c/0/0", STAGING)))
    parts = [_data(size, seed=7), b"tail end"]
    receipts = [
        pickle.loads(pickle.dumps(store)).write_part(handle, i, [part])
        for i, part in enumerate(parts)
    ]
    store.finish_parts(handle, pickle.loads(pickle.dumps(receipts)), b"", b"")
    assert store.get("arr/c/0/0") == b"".join(parts)


# -- backend specifics ---------------------------------------------------------
def test_zarr_store_refuses_parts() -> None:
    store = ZarrShardStore(zarr.storage.MemoryStore())
    assert not store.supports_parts
    with pytest.raises(
        PartsNotSupportedError, match="cannot write a shard in parts; raise max_mem"
    ):
        store.begin_parts("arr/c/0", STAGING)
    handle = PartsHandle("arr/c/0", "upload-id", STAGING)
    with pytest.raises(PartsNotSupportedError, match="ZarrShardStore"):
        store.write_part(handle, 0, [b"x"])
    with pytest.raises(PartsNotSupportedError, match="ZarrShardStore"):
        store.finish_parts(handle, [PartReceipt(0, 1)], b"", b"")
    with pytest.raises(PartsNotSupportedError, match="ZarrShardStore"):
        store.abort_parts(handle)
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
    assert store.head_size(4_000) == 5 * MiB
    assert store.head_size(6 * MiB) == 6 * MiB
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
