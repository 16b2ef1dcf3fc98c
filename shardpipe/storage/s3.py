"""S3 backend: one PUT per whole shard, one multipart upload per shard written in parts.

* ``put`` is a single ``PutObject``: the object appears at its key in one
  step, readers see the old object or the new one.
* A shard written in parts is one S3 multipart upload. Part number 1 is
  reserved for the head, the tasks' parts ``0, 1, ...`` become part numbers
  ``2, 3, ...`` and the tail (the index when it goes at the end) takes the
  last part number, 10,000. ``CompleteMultipartUpload`` publishes the shard
  atomically; until then nothing is visible at the key. Re-uploading a part
  number replaces the earlier upload, so retried tasks are idempotent.
* S3 refuses parts under 5 MiB except the last one (``min_part_size``): the
  callers pad parts and the head (the shard format decides how).
* ``copy_part`` is ``UploadPartCopy`` of a byte range, also of the object
  being replaced: an object can be composed from its old bytes server side.
* Conditional writes: ``If-None-Match: *`` (create-only) and ``If-Match``
  with the ETag read earlier (replace-if-unchanged) on ``PutObject`` and
  ``CompleteMultipartUpload``; a failed condition (HTTP 412, or 409
  ``ConditionalRequestConflict`` when a concurrent write wins the race) is a
  ``ConditionFailedError``. Some S3-compatible servers (moto among them)
  ignore ``If-Match`` on ``CompleteMultipartUpload``: the ETag is also
  checked just before completing. After a failed conditional completion the
  upload is left for ``abort_parts`` or ``cleanup`` (after a 409 AWS wants a
  new upload).

Each upload started is recorded in a small marker object under the write's
staging prefix (its UploadId and shard key); finishing or aborting removes
it, and ``cleanup`` aborts exactly the uploads its markers name, so a failed
write leaves no open upload and never touches another writer's.

Botocore calls go through ``S3FileSystem.call_s3`` (s3fs's retries); a fault
that survives them is a ``StorageError`` naming the key, with the original
exception as ``__cause__``. An absent object is ``None`` for ``get``/``size``
and ``FileNotFoundError`` for ``get_range``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Buffer, Iterator, Sequence
from typing import Any

import s3fs

from shardpipe.errors import ConditionFailedError, StorageError
from shardpipe.storage.base import (
    ObjectVersion,
    PartReceipt,
    PartsHandle,
    ShardStore,
    StoreAbilities,
)

_HEAD_PART = 1
_FIRST_PART = 2
_TAIL_PART = 10_000
_MARKER_SUFFIX = ".upload"
_MAX_TASK_PARTS = _TAIL_PART - 2


def _join(buffers: Sequence[Buffer]) -> bytes:
    return b"".join(memoryview(b).cast("B") for b in buffers)


def _error_code(err: BaseException) -> str | None:
    """S3's error code in ``err`` or in what caused it (s3fs translates botocore errors)."""
    seen: BaseException | None = err
    while seen is not None:
        response = getattr(seen, "response", None)
        if isinstance(response, dict):
            code = response.get("Error", {}).get("Code")
            if code is not None:
                return str(code)
        seen = seen.__cause__
    return None


# 412, and 409 when a concurrent conditional write to the key won (AWS)
_CONDITION_CODES = {"PreconditionFailed", "412", "ConditionalRequestConflict"}


def _conditions(if_absent: bool, if_version: ObjectVersion | None) -> dict[str, str]:
    if if_absent and if_version is not None:
        raise ValueError("if_absent and if_version exclude each other")
    if if_absent:
        return {"IfNoneMatch": "*"}
    return {} if if_version is None else {"IfMatch": if_version}


class S3ShardStore(ShardStore):
    """Shards as objects under ``bucket/prefix`` on S3 (or an S3-compatible server).

    Parameters
    ----------
    fs : s3fs.S3FileSystem
        The file system; its credentials, endpoint and retry settings are used.
    root : str
        ``"bucket"`` or ``"bucket/prefix"`` (an ``s3://`` scheme is accepted);
        keys are relative to it.

    Notes
    -----
    ``max_parts`` counts the tasks' parts: the head and the tail take the two
    remaining part numbers of S3's 10,000.
    """

    abilities = StoreAbilities(
        parts=True,
        copy_range=True,
        create_only=True,
        replace_if_unchanged=True,
        joins_buffers=True,
        min_part_size=5 * 2**20,
        max_parts=_MAX_TASK_PARTS,
    )
    _page_size = 1000

    def __init__(self, fs: s3fs.S3FileSystem, root: str) -> None:
        root = root.removeprefix("s3://").strip("/")
        bucket, _, prefix = root.partition("/")
        if not bucket:
            raise ValueError(f"S3 root {root!r} names no bucket")
        self.fs = fs
        self.bucket = bucket
        self.prefix = f"{prefix}/" if prefix else ""

    def __repr__(self) -> str:
        return f"S3ShardStore({f'{self.bucket}/{self.prefix}'.rstrip('/')!r})"

    def _key(self, key: str) -> str:
        return self.prefix + key

    def _call(self, method: str, key: str, **kwargs: Any) -> dict[str, Any]:
        try:
            result: dict[str, Any] = self.fs.call_s3(method, Bucket=self.bucket, **kwargs)
        except Exception as err:
            # S3 answers If-Match on an absent key with 404: the condition failed too
            # (NoSuchUpload, for a completion, is not that)
            absent = "IfMatch" in kwargs and _error_code(err) in ("NoSuchKey", "404")
            if absent or _error_code(err) in _CONDITION_CODES:
                raise self._condition_failed(method, key, kwargs) from err
            raise StorageError(
                f"S3 {method} of s3://{self.bucket}/{self._key(key)} failed: {err!r}"
            ) from err
        return result

    def _condition_failed(
        self, method: str, key: str, conditions: dict[str, Any]
    ) -> ConditionFailedError:
        """The error for a refused conditional ``method`` of ``key``, with what is there now."""
        if "IfNoneMatch" in conditions:
            expected = "no object (create-only write)"
        else:
            expected = f"version {conditions.get('IfMatch')}"
        try:
            found = self.version(key)
        except StorageError:
            described = "an object whose version could not be read"
        else:
            described = "no object" if found is None else f"version {found}"
        return ConditionFailedError(
            f"S3 {method} of s3://{self.bucket}/{self._key(key)}: expected {expected}, "
            f"found {described}; nothing was written"
        )

    # -- whole objects -------------------------------------------------------
    def put(
        self,
        key: str,
        buffers: Sequence[Buffer],
        *,
        if_absent: bool = False,
        if_version: ObjectVersion | None = None,
    ) -> None:
        """Publish the concatenation of ``buffers`` at ``key`` with one ``PutObject``."""
        conditions = _conditions(if_absent, if_version)
        self._call("put_object", key, Key=self._key(key), Body=_join(buffers), **conditions)
        self.fs.invalidate_cache(f"{self.bucket}/{self._key(key)}")

    def _cat(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        path = f"{self.bucket}/{self._key(key)}"
        try:
            data: bytes = self.fs.cat_file(path, start=start, end=end)
        except FileNotFoundError as err:
            raise FileNotFoundError(f"no S3 object s3://{path}: {err}") from err
        except Exception as err:
            raise StorageError(f"S3 GET of s3://{path} failed: {err!r}") from err
        return data

    def get(self, key: str) -> bytes | None:
        """Return the bytes at ``key``, or ``None`` when absent."""
        try:
            return self._cat(key)
        except FileNotFoundError:
            return None

    def get_range(self, key: str, start: int, stop: int) -> bytes:
        """Return ``[start, stop)`` of the object at ``key`` with one ranged GET."""
        if not 0 <= start <= stop:
            raise ValueError(f"invalid byte range [{start}, {stop}) of {key!r}")
        # an empty Range header would be ignored by S3 and return the whole object
        return b"" if start == stop else self._cat(key, start, stop)

    def _head(self, key: str) -> dict[str, Any] | None:
        try:
            return self._call("head_object", key, Key=self._key(key))
        except StorageError as err:
            if isinstance(err.__cause__, FileNotFoundError):
                return None
            raise

    def size(self, key: str) -> int | None:
        """Return the size of the object at ``key``, or ``None`` when absent."""
        head = self._head(key)
        return None if head is None else int(head["ContentLength"])

    def version(self, key: str) -> ObjectVersion | None:
        """Return the ETag of the object at ``key``, or ``None`` when absent."""
        head = self._head(key)
        return None if head is None else str(head["ETag"])

    def delete(self, key: str) -> None:
        """Remove ``key`` if present."""
        self._call("delete_object", key, Key=self._key(key))
        self.fs.invalidate_cache(f"{self.bucket}/{self._key(key)}")

    def list(self, prefix: str) -> Iterator[str]:
        """Iterate over the keys that start with ``prefix`` (a plain string prefix)."""
        kwargs: dict[str, Any] = {"Prefix": self._key(prefix), "MaxKeys": self._page_size}
        while True:
            page = self._call("list_objects_v2", prefix, **kwargs)
            for obj in page.get("Contents", []):
                yield obj["Key"][len(self.prefix) :]
            if not page.get("IsTruncated"):
                return
            kwargs["ContinuationToken"] = page["NextContinuationToken"]

    # -- parts ---------------------------------------------------------------
    def _marker(self, staging: str, key: str) -> str:
        """Key of the object recording the upload of ``key`` (its id, then the key)."""
        return f"{staging}/{hashlib.sha1(key.encode()).hexdigest()}{_MARKER_SUFFIX}"

    def begin_parts(self, key: str, staging: str) -> PartsHandle:
        """Create the multipart upload of ``key`` and record it under ``staging``."""
        upload_id = str(self._call("create_multipart_upload", key, Key=self._key(key))["UploadId"])
        self.put(self._marker(staging, key), [f"{upload_id}\n{key}".encode()])
        return PartsHandle(key, upload_id, staging)

    def _upload(self, handle: PartsHandle, part_number: int, body: bytes) -> str:
        kwargs = {"Key": self._key(handle.key), "UploadId": handle.upload, "Body": body}
        return str(self._call("upload_part", handle.key, PartNumber=part_number, **kwargs)["ETag"])

    def write_part(
        self, handle: PartsHandle, number: int, buffers: Sequence[Buffer]
    ) -> PartReceipt:
        """Upload part ``number`` as S3 part number ``number + 2`` (replacing an earlier try).

        Every part but the shard's last must be at least ``min_part_size`` bytes.
        """
        if not 0 <= number < _MAX_TASK_PARTS:
            raise ValueError(
                f"part number {number} of {handle.key!r} not in [0, {_MAX_TASK_PARTS})"
            )
        body = _join(buffers)
        etag = self._upload(handle, number + _FIRST_PART, body)
        return PartReceipt(number, len(body), etag)

    def copy_part(
        self, handle: PartsHandle, number: int, source: str, start: int, stop: int
    ) -> PartReceipt:
        """Make bytes ``[start, stop)`` of ``source`` part ``number`` with ``UploadPartCopy``."""
        if not 0 <= number < _MAX_TASK_PARTS:
            raise ValueError(
                f"part number {number} of {handle.key!r} not in [0, {_MAX_TASK_PARTS})"
            )
        if not 0 <= start < stop:
            raise ValueError(f"invalid byte range [{start}, {stop}) of {source!r}")
        try:
            result = self._call(
                "upload_part_copy",
                handle.key,
                Key=self._key(handle.key),
                UploadId=handle.upload,
                PartNumber=number + _FIRST_PART,
                CopySource={"Bucket": self.bucket, "Key": self._key(source)},
                CopySourceRange=f"bytes={start}-{stop - 1}",
            )
        except StorageError as err:
            # AWS says NoSuchKey; moto answers a bare 404 (which could also mean
            # that the upload is gone)
            code = _error_code(err)
            if code in ("NoSuchKey", "404"):
                maybe = "" if code == "NoSuchKey" else f" (or no upload {handle.upload})"
                raise FileNotFoundError(
                    f"no S3 object s3://{self.bucket}/{self._key(source)} to copy from{maybe}"
                ) from err
            raise
        return PartReceipt(number, stop - start, str(result["CopyPartResult"]["ETag"]))

    def finish_parts(
        self,
        handle: PartsHandle,
        receipts: Sequence[PartReceipt],
        head: bytes,
        tail: bytes,
        *,
        if_absent: bool = False,
        if_version: ObjectVersion | None = None,
    ) -> None:
        """Upload head (part 1) and tail (part 10,000), then complete the upload.

        Every part but the last, the head and the tail included, must have
        ``min_part_size`` bytes. With no receipts and an empty head and tail
        the upload is aborted. On failure (a failed condition included) the
        upload stays open for ``abort_parts`` or ``cleanup``.
        """
        conditions = _conditions(if_absent, if_version)
        by_number: dict[int, PartReceipt] = {}
        for receipt in receipts:
            if receipt.etag is None or by_number.setdefault(receipt.number, receipt) != receipt:
                raise ValueError(f"receipt {receipt!r} of {handle.key!r}: no ETag or a conflict")
        ordered = [by_number[n] for n in sorted(by_number)]
        sizes = [len(head)] * bool(head) + [r.size for r in ordered] + [len(tail)] * bool(tail)
        if not sizes:
            self.abort_parts(handle)
            return
        small = [i for i, size in enumerate(sizes[:-1]) if size < self.min_part_size]
        if small:
            raise ValueError(
                f"S3 needs {self.min_part_size} bytes in every part but the last of "
                f"{handle.key!r}; part {small[0]} of {len(sizes)} (head and tail included) "
                f"has {sizes[small[0]]}"
            )
        parts: list[dict[str, Any]] = [
            {"PartNumber": r.number + _FIRST_PART, "ETag": r.etag} for r in ordered
        ]
        for number, body in [(_HEAD_PART, head), (_TAIL_PART, tail)]:
            if body:
                parts.append({"PartNumber": number, "ETag": self._upload(handle, number, body)})
        parts.sort(key=lambda part: part["PartNumber"])
        kwargs = {"Key": self._key(handle.key), "UploadId": handle.upload, **conditions}
        # servers that ignore If-Match on completion (moto) still get this check;
        # AWS enforces the header itself, closing the window after it
        if if_version is not None and self.version(handle.key) != if_version:
            raise self._condition_failed("complete_multipart_upload", handle.key, conditions)
        self._call(
            "complete_multipart_upload", handle.key, MultipartUpload={"Parts": parts}, **kwargs
        )
        self.fs.invalidate_cache(f"{self.bucket}/{self._key(handle.key)}")
        self.delete(self._marker(handle.staging, handle.key))

    def abort_parts(self, handle: PartsHandle) -> None:
        """Abort the multipart upload of ``handle`` (nothing to do if it is already gone)."""
        self._abort(handle.key, self._key(handle.key), handle.upload)
        self.delete(self._marker(handle.staging, handle.key))

    def _abort(self, key: str, full_key: str, upload_id: str) -> bool:
        try:
            self._call("abort_multipart_upload", key, Key=full_key, UploadId=upload_id)
        except StorageError as err:
            if isinstance(err.__cause__, FileNotFoundError):  # NoSuchUpload
                return False
            raise
        return True

    def cleanup(self, staging: str, shard_prefix: str) -> int:
        """Abort the multipart uploads the write with staging prefix ``staging`` left open.

        ``begin_parts`` records every upload it starts in a marker object under
        ``staging``; this aborts exactly those uploads (never another writer's)
        and removes the markers.

        Returns
        -------
        int
            How many leftovers were removed: uploads aborted plus markers.
        """
        removed = 0
        for marker in list(self.list(f"{staging}/")):
            upload_id, _, key = (self.get(marker) or b"").decode().partition("\n")
            if upload_id and key:
                removed += self._abort(key, self._key(key), upload_id)
            self.delete(marker)
            removed += 1
        return removed
