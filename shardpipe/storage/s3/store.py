"""S3 backend: one PUT per whole shard, one multipart upload per shard written in parts.

* ``put`` is a single ``PutObject``: the object appears at its key in one
  step, readers see the old object or the new one.
* A shard written in parts is one S3 multipart upload, which
  ``CompleteMultipartUpload`` publishes atomically; parts may be copied
  server side from existing objects (:mod:`shardpipe.storage.s3.multipart`).
* Conditional writes: ``If-None-Match: *`` (create-only) and ``If-Match``
  with the ETag read earlier (replace-if-unchanged) on ``PutObject`` and
  ``CompleteMultipartUpload``; a failed condition (HTTP 412, or 409
  ``ConditionalRequestConflict`` when a concurrent write wins the race) is a
  ``ConditionFailedError``.

A conditional ``PutObject`` whose response was lost may have landed, and the
client's retry (botocore's, or aiohttp's own on a reused connection, which
shardpipe cannot turn off or see) then finds the condition false: each
conditional put carries a random token in its metadata
(``x-amz-meta-shardpipe-put``), and a refused put whose token is on the
object succeeded. (A put of the same bytes by anyone else is still refused.)

Faults, timeouts and retries
----------------------------
Every fault that survives the client's own retries is a ``StorageError``
naming the operation, the key (``s3://bucket/key``), the cause and the fix,
in one line, with the original exception as ``__cause__``: transient,
a matter of access, or neither, as :func:`.faults.classify` decides.

The file systems made by :mod:`~shardpipe.storage.s3.config` (the ones shardpipe writes
shards with) retry in botocore only (standard mode, 3 attempts with jittered
exponential backoff, connect timeout 5 s, read timeout 15 s) and not again in
s3fs, so that botocore's, s3fs's and shardpipe's retries do
not multiply into minutes. The user's ``config_kwargs`` override each of
these. :meth:`S3ShardStore.check_reachable` makes one small request so that
a missing credential, a wrong endpoint or bucket shows before anything is
written. An absent object is ``None`` for ``get``/``size`` and
``FileNotFoundError`` for ``get_range``.
"""

from __future__ import annotations

import builtins
import uuid
from collections.abc import Buffer, Iterator, Sequence
from typing import Any

import s3fs

from shardpipe.errors import ConditionFailedError, StorageAccessError, StorageError
from shardpipe.storage.base import (
    ObjectVersion,
    ShardStore,
    StoreAbilities,
)
from shardpipe.storage.buffers import joined
from shardpipe.storage.http_bodies import send_body
from shardpipe.storage.keys import edge_key
from shardpipe.storage.parts import PartReceipt, PartsHandle
from shardpipe.storage.s3 import faults, multipart
from shardpipe.storage.s3.bodies import put_body
from shardpipe.storage.s3.multipart import MAX_TASK_PARTS
from shardpipe.storage.s3.multipart import multipart_etag as multipart_etag
from shardpipe.storage.s3.object_reads import S3ObjectReads

_PUT_TOKEN = "shardpipe-put"  # metadata key of a conditional put's own token
_DELETE_BATCH = 1000  # most keys one DeleteObjects takes


def _conditions(if_absent: bool, if_version: ObjectVersion | None) -> dict[str, str]:
    if if_absent and if_version is not None:
        raise ValueError("if_absent and if_version exclude each other")
    if if_absent:
        return {"IfNoneMatch": "*"}
    return {} if if_version is None else {"IfMatch": if_version}


class S3ShardStore(S3ObjectReads, ShardStore):
    """Shards as objects under ``bucket/prefix`` on S3 (or an S3-compatible server).

    Parameters
    ----------
    fs : s3fs.S3FileSystem
        The file system; its credentials, endpoint and retry settings are used.
    root : str
        ``"bucket"`` or ``"bucket/prefix"`` (an ``s3://`` scheme is accepted);
        keys are relative to it.
    fs_retries : int, optional
        Tries s3fs makes of each call (its ``retries`` attribute), set on
        ``fs`` here and again after unpickling (s3fs does not pickle it).
        None leaves ``fs`` as it is.

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
        max_parts=MAX_TASK_PARTS,
        background_puts=True,
        reads_at_once=True,
    )
    _page_size = 1000

    def __init__(self, fs: s3fs.S3FileSystem, root: str, *, fs_retries: int | None = None) -> None:
        root = root.removeprefix("s3://").strip("/")
        bucket, _, prefix = root.partition("/")
        if not bucket:
            raise ValueError(f"S3 root {root!r} names no bucket")
        self.fs = fs
        self.bucket = bucket
        self.prefix = f"{prefix}/" if prefix else ""
        self.fs_retries = fs_retries
        # whether the endpoint has answered: a connection refused later is a
        # transient fault, before it the endpoint is wrong or down (pickled along)
        self.reached = False
        self._apply_fs_retries()

    def _apply_fs_retries(self) -> None:
        if self.fs_retries is not None:
            self.fs.retries = self.fs_retries

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._apply_fs_retries()

    def __repr__(self) -> str:
        return f"S3ShardStore({f'{self.bucket}/{self.prefix}'.rstrip('/')!r})"

    def full_key(self, key: str) -> str:
        """The S3 key of ``key`` (relative to the root): the prefix and ``key``.

        Parameters
        ----------
        key : str
            A key relative to the store's root.

        Returns
        -------
        str
            The object's key in the bucket.

        Raises
        ------
        shardpipe.errors.UnsafeKeyError
            If ``key`` could lead outside the root (``..``, ``//``, a leading
            ``/``...): S3 keeps such keys as they are, but the HTTP client
            may resolve the dot parts of the URL, and the key would mean
            another object on a file system. Every request names its key
            through here.
        """
        return self.prefix + edge_key(key, self)

    def _url(self, key: str) -> str:
        return f"s3://{self.bucket}/{self.prefix}{key}"  # for messages: not checked

    @property
    def endpoint(self) -> str:
        """The endpoint URL the file system talks to (or AWS's default)."""
        client_kwargs = getattr(self.fs, "client_kwargs", None) or {}
        url = getattr(self.fs, "endpoint_url", None) or client_kwargs.get("endpoint_url")
        return str(url) if url else "AWS's default endpoint"

    # -- errors --------------------------------------------------------------
    def _fault(self, operation: str, key: str, err: BaseException) -> StorageError:
        """The one-line shardpipe error for ``err``, raised by ``operation`` on ``key``."""
        kind, cause, fix = faults.classify(
            err,
            endpoint=self.endpoint,
            bucket=self.bucket,
            reached=self.reached,
            attempts=faults.describe_attempts(getattr(self.fs, "config_kwargs", None) or {}),
        )
        where = f"S3 {operation} of {self._url(key)} failed"
        return kind(f"{where}: {cause}; {fix}" if fix else f"{where}: {cause}")

    def call(self, method: str, key: str, **kwargs: Any) -> dict[str, Any]:
        """Make the S3 request ``method`` about ``key``; a failure is a shardpipe error.

        Parameters
        ----------
        method : str
            The botocore client method (``"put_object"``...).
        key : str
            The key the request is about (relative to the root), for messages.
        **kwargs
            The request's parameters besides ``Bucket``.

        Returns
        -------
        dict
            botocore's response.

        Raises
        ------
        shardpipe.errors.ConditionFailedError
            A refused ``IfMatch``/``IfNoneMatch`` (on an absent key too).
        shardpipe.errors.StorageError
            Any other fault, of the kind :func:`.faults.classify` tells.
        """
        try:
            result: dict[str, Any] = self.fs.call_s3(method, Bucket=self.bucket, **kwargs)
        except Exception as err:
            # S3 answers If-Match on an absent key with 404: the condition failed too
            # (NoSuchUpload, for a completion, is not that)
            absent = "IfMatch" in kwargs and faults.error_code(err) in ("NoSuchKey", "404")
            if absent or faults.error_code(err) in faults.CONDITION_CODES:
                raise self.condition_failed(method, key, kwargs) from err
            raise self._fault(method, key, err) from err
        self.reached = True
        return result

    def check_reachable(self, key: str = "zarr.json") -> None:
        """Raise unless the bucket answers with these credentials (one ranged GET of ``key``).

        An absent ``key`` is fine. Called when a store is resolved, so that
        missing credentials, a wrong endpoint or bucket fail before anything
        is written.

        Raises
        ------
        shardpipe.errors.StorageAccessError
            No credentials, rejected ones, no such bucket, an endpoint that
            cannot be reached or does not speak S3.
        shardpipe.errors.StorageError
            Another fault (a transient one outlasted the client's retries).
        """
        path = f"{self.bucket}/{self.full_key(key)}"
        try:
            self.fs.cat_file(path, start=0, end=1)
        except Exception as err:
            code = faults.error_code(err)
            response = faults.error_response(err)
            if response is not None and not faults.speaks_s3(response):
                cause = f"HTTP {code} without an S3 error document or x-amz headers"
                raise StorageAccessError(
                    f"S3 GET of s3://{path} failed: the endpoint {self.endpoint} does not speak "
                    f"S3 ({cause}); check endpoint_url in storage_options"
                ) from err
            if code not in ("NoSuchKey", "InvalidRange"):
                raise self._fault("GET", key, err) from err
        self.reached = True

    def condition_failed(
        self, method: str, key: str, conditions: dict[str, Any]
    ) -> ConditionFailedError:
        """The error for a refused conditional ``method`` of ``key``, with what is there now.

        Parameters
        ----------
        method : str
            The request refused.
        key : str
            Its key (relative to the root).
        conditions : dict
            Its parameters, ``IfNoneMatch`` or ``IfMatch`` among them.

        Returns
        -------
        shardpipe.errors.ConditionFailedError
            Saying what was expected and what is at ``key`` now.
        """
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
            f"S3 {method} of {self._url(key)}: expected {expected}, "
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
        """Publish the concatenation of ``buffers`` at ``key`` with one ``PutObject``.

        The body carries its CRC32C
        (:func:`~shardpipe.storage.s3.bodies.put_body`), which S3 checks. A
        conditional put carries a token of its own in the object's metadata
        (``x-amz-meta-shardpipe-put``): when a try whose answer was lost did
        land, the client's retry finds the condition false, and the token
        then tells that the object is this put's, so it succeeded.
        """
        conditions = _conditions(if_absent, if_version)
        body = put_body(buffers, checksum=self._checksums)
        if conditions:
            self._put_conditionally(key, body, conditions)
        else:
            self.call("put_object", key, Key=self.full_key(key), **body)
        self.fs.invalidate_cache(f"{self.bucket}/{self.full_key(key)}")

    def joined_body(self, buffers: Sequence[Buffer]) -> Buffer:
        """The :class:`~shardpipe.storage.http_bodies.SendBody` :meth:`put` sends as it is."""
        return send_body(buffers)

    @property
    def _checksums(self) -> bool:
        """Whether puts carry a checksum: unless botocore is told ``"when_required"``.

        As the client resolved it: ``config_kwargs``, the
        ``AWS_REQUEST_CHECKSUM_CALCULATION`` variable or the AWS config file.
        """
        config = getattr(getattr(self.fs.s3, "meta", None), "config", None)
        return getattr(config, "request_checksum_calculation", None) != "when_required"

    def _put_conditionally(
        self, key: str, body: dict[str, Any], conditions: dict[str, str]
    ) -> None:
        token = uuid.uuid4().hex
        try:
            self.call(
                "put_object",
                key,
                Key=self.full_key(key),
                Metadata={_PUT_TOKEN: token},
                **body,
                **conditions,
            )
        except ConditionFailedError as err:
            # a try of this very put whose answer was lost, retried by the client
            # (botocore, or aiohttp on a reused connection), finds its own object
            if not self._holds_token(key, token, err):
                raise

    def _holds_token(self, key: str, token: str, err: StorageError) -> bool:
        try:
            head = self.head_object(key)
        except StorageError as again:
            err.add_note(f"whether this put landed all the same is unknown: {again}")
            return False
        return head is not None and (head.get("Metadata") or {}).get(_PUT_TOKEN) == token

    def head_object(self, key: str) -> dict[str, Any] | None:
        """botocore's ``HeadObject`` answer for ``key`` (relative to the root), None when absent.

        The answer holds ``ETag``, ``ContentLength``, ``Metadata``...
        """
        try:
            return self.call("head_object", key, Key=self.full_key(key))
        except StorageError as err:
            if (
                isinstance(err.__cause__, FileNotFoundError)
                and faults.error_code(err) != "NoSuchBucket"
            ):
                return None
            raise

    def size(self, key: str) -> int | None:
        """Return the size of the object at ``key``, or ``None`` when absent."""
        head = self.head_object(key)
        return None if head is None else int(head["ContentLength"])

    def version(self, key: str) -> ObjectVersion | None:
        """Return the ETag of the object at ``key``, or ``None`` when absent."""
        head = self.head_object(key)
        return None if head is None else str(head["ETag"])

    def delete(self, key: str) -> None:
        """Remove ``key`` if present."""
        self.call("delete_object", key, Key=self.full_key(key))
        self.fs.invalidate_cache(f"{self.bucket}/{self.full_key(key)}")

    def delete_many(self, keys: Sequence[str]) -> None:
        """Remove each of ``keys`` present: a ``DeleteObjects`` per 1,000 (all checked first).

        A key S3 could not remove is raised (the batch's others are gone). One
        by one where the client sends no checksum headers (botocore adds one
        to every ``DeleteObjects``) or the server has no multi-object delete.
        """
        full = [self.full_key(key) for key in keys]
        try:
            if not self._checksums:
                return super().delete_many(keys)
            for start in range(0, len(full), _DELETE_BATCH):
                batch = full[start : start + _DELETE_BATCH]
                try:
                    answer = self.call(
                        "delete_objects",
                        keys[start],
                        Delete={"Objects": [{"Key": key} for key in batch], "Quiet": True},
                    )
                except StorageError as err:
                    if faults.error_code(err) not in faults.NO_MULTI_DELETE:
                        raise
                    return super().delete_many(keys[start:])
                if answer.get("Errors"):
                    raise faults.refused_deletes(self.bucket, len(batch), answer["Errors"])
        finally:
            self.fs.invalidate_cache()  # s3fs's listings cache: whatever it held may be gone

    def list(self, prefix: str) -> Iterator[str]:
        """Iterate over the keys that start with ``prefix`` (a plain string prefix).

        A listed key that could lead outside the root (S3 keys may hold
        ``..``) is refused with :class:`~shardpipe.errors.UnsafeKeyError`.
        """
        edge_key(prefix, self, prefix=True)
        kwargs: dict[str, Any] = {"Prefix": self.prefix + prefix, "MaxKeys": self._page_size}
        while True:
            page = self.call("list_objects_v2", prefix, **kwargs)
            for obj in page.get("Contents", []):
                yield edge_key(obj["Key"][len(self.prefix) :], self)
            if not page.get("IsTruncated"):
                return
            kwargs["ContinuationToken"] = page["NextContinuationToken"]

    def open_uploads(self, prefix: str) -> builtins.list[tuple[str, str]]:
        """``(key, upload id)`` of every open multipart upload whose key starts with ``prefix``.

        ``prefix`` is a plain string prefix, keys are relative to the root.
        Paginated, listed whole before the caller aborts any (aborting while
        paging would move the markers).
        """
        edge_key(prefix, self, prefix=True)
        kwargs: dict[str, Any] = {"Prefix": self.prefix + prefix, "MaxUploads": self._page_size}
        found: builtins.list[tuple[str, str]] = []
        while True:
            page = self.call("list_multipart_uploads", prefix, **kwargs)
            for upload in page.get("Uploads", []):
                full = str(upload["Key"])
                if full.startswith(self.prefix):
                    found.append((full[len(self.prefix) :], str(upload["UploadId"])))
            if not page.get("IsTruncated"):
                return found
            kwargs["KeyMarker"] = page["NextKeyMarker"]
            kwargs["UploadIdMarker"] = page["NextUploadIdMarker"]

    # -- parts (one multipart upload per shard: see s3_multipart) ------------
    def begin_parts(self, key: str, staging: str, *, any_order: bool = False) -> PartsHandle:
        """Create the upload of ``key``, recorded under ``staging`` (safe to repeat).

        Parts lie by their numbers, whatever ``any_order`` says.
        """
        edge_key(staging, self, prefix=True)
        return multipart.begin_parts(self, edge_key(key, self), staging)

    def write_part(
        self, handle: PartsHandle, number: int, buffers: Sequence[Buffer]
    ) -> PartReceipt:
        """Upload part ``number`` as S3 part number ``number + 2`` (replacing an earlier try)."""
        edge_key(handle.key, self)
        return multipart.write_part(self, handle, number, joined(buffers))

    def copy_part(
        self, handle: PartsHandle, number: int, source: str, start: int, stop: int
    ) -> PartReceipt:
        """Make bytes ``[start, stop)`` of ``source`` part ``number`` with ``UploadPartCopy``."""
        edge_key(handle.key, self)
        return multipart.copy_part(self, handle, number, edge_key(source, self), start, stop)

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

        A failed condition leaves the upload open for ``abort_parts`` or ``cleanup``.
        """
        edge_key(handle.key, self)
        conditions = _conditions(if_absent, if_version)
        multipart.finish_parts(self, handle, receipts, head, tail, conditions)

    def abort_parts(self, handle: PartsHandle) -> None:
        """Abort the upload of ``handle`` and any other open upload of its key."""
        edge_key(handle.key, self)
        multipart.abort_parts(self, handle)

    def cleanup(self, staging: str, shard_prefix: str) -> int:
        """Abort every upload of a key recorded under ``staging``; remove the records.

        Returns
        -------
        int
            How many leftovers were removed: uploads aborted plus markers.
        """
        return multipart.cleanup(self, staging, shard_prefix)
