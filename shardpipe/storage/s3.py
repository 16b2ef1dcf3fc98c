"""S3 backend: one PUT per whole shard, one multipart upload per shard written in parts.

* ``put`` is a single ``PutObject``: the object appears at its key in one
  step, readers see the old object or the new one.
* A shard written in parts is one S3 multipart upload. Part number 1 is
  reserved for the head, the tasks' parts ``0, 1, ...`` become part numbers
  ``2, 3, ...`` and the tail (the index when it goes at the end) takes the
  last part number, 10,000. ``CompleteMultipartUpload`` publishes the shard
  atomically; until then nothing is visible at the key. Re-uploading a part
  number replaces the earlier upload, so retried tasks are idempotent and a
  shard never mixes two attempts of a part.
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

Finding every upload (faults in transit)
----------------------------------------
A request whose response is lost may still have been carried out, and the
client retries it. For ``CreateMultipartUpload`` that makes a second upload
of the same key, and the id of the first one is never heard of. S3 keeps no
user data of an *open* upload that can be read back (``ListMultipartUploads``
returns only the key, upload id, initiator, storage class and start time;
metadata and tags show only once the object is complete), so uploads are
found by their key, and the keys are recorded before the uploads exist:

* ``begin_parts`` first writes a marker object under the write's staging
  prefix naming the shard key (``<staging>/<sha1 of key>.upload``), then
  creates the upload and records its id in the marker. It then lists the
  open uploads of exactly that key and aborts all but its own: the
  duplicates of a create whose response was lost, or what an earlier try
  of the same task left. (Only one shardpipe job at a time writes an array,
  which its job marker guarantees, and it begins each shard once, so every
  other upload of the key is a leftover.)
* ``finish_parts`` and ``abort_parts`` abort any other upload of the key
  again before they remove the marker (a request delayed in the network
  may create an upload late).
* ``cleanup(staging, shard_prefix)`` reads the markers under ``staging``,
  lists the open uploads under ``shard_prefix`` (paginated) and aborts
  every upload whose key a marker names, whatever its id; then it removes
  the markers. It never touches an upload whose key no marker under
  ``staging`` names: keys outside the array, and other writes' staging
  areas, are left alone.

A conditional ``PutObject`` whose response was lost may have landed, and the
client's retry (botocore's, or aiohttp's own on a reused connection, which
shardpipe cannot turn off or see) then finds the condition false: each
conditional put carries a random token in its metadata
(``x-amz-meta-shardpipe-put``), and a refused put whose token is on the
object succeeded. (A put of the same bytes by anyone else is still refused.)

A ``CompleteMultipartUpload`` whose response was lost may have published
the shard: when completing fails (a transient fault, ``NoSuchUpload``, a
failed condition), ``finish_parts`` compares the object now at the key
with what the completion would have made: same size, and the multipart
ETag, the MD5 of the parts' binary MD5s followed by ``-<number of parts>``,
computed from the part ETags it sent. If they match the publish succeeded.

Faults, timeouts and retries
----------------------------
Every fault that survives the client's own retries is a ``StorageError``
naming the operation, the key (``s3://bucket/key``), the cause and the fix,
in one line, with the original exception as ``__cause__``:

* :class:`~shardpipe.errors.TransientStorageError` for HTTP 5xx (not 501),
  throttling (``SlowDown``...), timeouts, connections reset or refused after
  the endpoint had answered once, incomplete reads: worth trying again,
  which :class:`~shardpipe.storage.retry.RetryingStore` does;
* :class:`~shardpipe.errors.StorageAccessError` for missing or rejected
  credentials, ``AccessDenied``, ``NoSuchBucket``, an endpoint that cannot be
  reached at all or does not speak S3: never retried;
* a plain :class:`~shardpipe.errors.StorageError` otherwise.

The file systems made by :func:`s3_storage_options` (the ones shardpipe
writes shards with) retry in botocore only (standard mode,
:data:`DEFAULT_CONFIG`: 3 attempts with jittered exponential backoff,
connect timeout 5 s, read timeout 15 s) and not again in s3fs
(:data:`S3FS_RETRIES`), so that botocore's, s3fs's and shardpipe's retries do
not multiply into minutes. The user's ``config_kwargs`` override each of
these. :meth:`S3ShardStore.check_reachable` makes one small request so that
a missing credential, a wrong endpoint or bucket shows before anything is
written. An absent object is ``None`` for ``get``/``size`` and
``FileNotFoundError`` for ``get_range``.
"""

from __future__ import annotations

import builtins
import hashlib
import re
import uuid
from collections.abc import Buffer, Iterator, Sequence
from typing import Any

import s3fs

from shardpipe.errors import (
    ConditionFailedError,
    StorageAccessError,
    StorageError,
    TransientStorageError,
)
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
_PUT_TOKEN = "shardpipe-put"  # metadata key of a conditional put's own token

DEFAULT_CONFIG: dict[str, Any] = {
    "connect_timeout": 5,
    "read_timeout": 15,
    "retries": {"total_max_attempts": 3, "mode": "standard"},
}
"""botocore ``Config`` of the file systems shardpipe writes shards with.

Overridden key by key by ``storage_options["config_kwargs"]``. Three
attempts in botocore's standard mode (retries of connection errors,
timeouts, HTTP 500/502/503/504 and throttling, with jittered exponential
backoff); a 5 s connect timeout; a 15 s read timeout (s3fs's own default:
the longest S3 may stay silent before a response, not a bound on the
transfer). :class:`~shardpipe.storage.retry.RetryingStore` retries what
still fails, so one call costs at most 3 x 15 s plus backoff before it does.
"""

S3FS_RETRIES = 1
"""Tries s3fs makes of each call on top of botocore's (1: it adds none).

s3fs's default, 5, nests (reads retry around calls that retry), so with
botocore's attempts one GET could be tried more than a hundred times.
"""


def s3_storage_options(storage_options: dict[str, Any]) -> dict[str, Any]:
    """``storage_options`` for the S3 file system shards are written with, with the defaults.

    :data:`DEFAULT_CONFIG` fills in what ``config_kwargs`` leaves out (a
    ``retries`` given there replaces the default whole).
    """
    options = {k: v for k, v in storage_options.items() if k != "asynchronous"}
    config = dict(DEFAULT_CONFIG)
    config.update(options.get("config_kwargs") or {})
    options["config_kwargs"] = config
    return options


def _join(buffers: Sequence[Buffer]) -> bytes:
    return b"".join(memoryview(b).cast("B") for b in buffers)


def _chain(err: BaseException) -> Iterator[BaseException]:
    """``err`` and what caused it (explicitly, else implicitly), without cycles."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen and len(seen) < 32:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _response(err: BaseException) -> dict[str, Any] | None:
    """The botocore response dict in ``err``'s chain (a ``ClientError``'s), if any."""
    for seen in _chain(err):
        response = getattr(seen, "response", None)
        if isinstance(response, dict) and isinstance(response.get("Error"), dict):
            return response
    return None


def _error_code(err: BaseException) -> str | None:
    """S3's error code in ``err`` or in what caused it (s3fs translates botocore errors)."""
    response = _response(err)
    if response is None:
        return None
    code = response["Error"].get("Code")
    return None if code is None else str(code)


def _names(err: BaseException) -> set[str]:
    """Qualified names of the classes of ``err`` (``"botocore.exceptions.ReadTimeoutError"``)."""
    return {f"{cls.__module__}.{cls.__name__}" for cls in type(err).__mro__}


def _any_named(err: BaseException, suffixes: frozenset[str]) -> BaseException | None:
    """The first exception of ``err``'s chain with a class named like one of ``suffixes``."""
    for seen in _chain(err):
        if any(name.rsplit(".", 1)[-1] in suffixes for name in _names(seen)):
            return seen
    return None


def _botocore_any(err: BaseException, names: frozenset[str]) -> BaseException | None:
    """The first exception of ``err``'s chain with a botocore class among ``names``."""
    for seen in _chain(err):
        for name in _names(seen):
            module, _, cls = name.rpartition(".")
            if module.startswith("botocore") and cls in names:
                return seen
    return None


def _one_line(err: BaseException, limit: int = 240) -> str:
    text = " ".join(str(err).split()) or "no message"
    text = text if len(text) <= limit else text[: limit - 3] + "..."
    return f"{type(err).__name__}: {text}"


def _speaks_s3(response: dict[str, Any]) -> bool:
    """Whether an error response looks like an S3 server's (an error document or x-amz headers)."""
    code = str(response["Error"].get("Code", ""))
    headers = response.get("ResponseMetadata", {}).get("HTTPHeaders", {}) or {}
    return not code.isdigit() or any(str(h).lower().startswith("x-amz") for h in headers)


_CREDENTIAL_ERRORS = frozenset(
    {
        "NoCredentialsError",
        "PartialCredentialsError",
        "CredentialRetrievalError",
        "NoAuthTokenError",
        "TokenRetrievalError",
        "UnauthorizedSSOTokenError",
        "SSOTokenLoadError",
        "ProfileNotFound",
    }
)
_CONNECT_ERRORS = frozenset(
    {"EndpointConnectionError", "ConnectTimeoutError", "SSLError", "ProxyConnectionError"}
)
_RESETS = frozenset(
    {"ConnectionResetError", "ConnectionAbortedError", "BrokenPipeError", "ServerDisconnectedError"}
)
_TRANSIENT_EXCEPTIONS = frozenset(
    {
        # botocore
        "ReadTimeoutError",
        "ConnectionClosedError",
        "HTTPClientError",
        "IncompleteReadError",
        "ResponseStreamingError",
        "ResponseParserError",
        # aiohttp, fsspec, the standard library
        "ClientPayloadError",
        "ServerDisconnectedError",
        "ClientOSError",
        "ClientConnectionError",
        "FSTimeoutError",
        "IncompleteRead",
        "ConnectionResetError",
        "ConnectionAbortedError",
        "ConnectionRefusedError",
        "BrokenPipeError",
        "TimeoutError",
    }
)
_BAD_CREDENTIALS = frozenset(
    {
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "InvalidToken",
        "ExpiredToken",
        "TokenRefreshRequired",
        "InvalidSecurity",
        "AuthorizationHeaderMalformed",
    }
)
_DENIED = frozenset({"AccessDenied", "AllAccessDisabled", "AccountProblem", "403"})
_TRANSIENT_CODES = frozenset(
    {
        "InternalError",
        "ServiceUnavailable",
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
        "RequestTimeout",
        "RequestTimeoutException",
        "PriorRequestNotComplete",
        "OperationAborted",
        "429",
    }
)
_CREDENTIALS_FIX = (
    "set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (or AWS_PROFILE), or pass "
    "storage_options={'key': ..., 'secret': ...} ({'anon': True} for a public bucket)"
)
_PERMISSIONS_FIX = (
    "use credentials allowed s3:GetObject, s3:PutObject, s3:DeleteObject, s3:ListBucket, "
    "s3:ListBucketMultipartUploads and s3:AbortMultipartUpload on the bucket"
)

# 412, and 409 when a concurrent conditional write to the key won (AWS)
_CONDITION_CODES = {"PreconditionFailed", "412", "ConditionalRequestConflict"}
_ETAG = re.compile(r'^"?([0-9a-fA-F]{32})"?$')


def _conditions(if_absent: bool, if_version: ObjectVersion | None) -> dict[str, str]:
    if if_absent and if_version is not None:
        raise ValueError("if_absent and if_version exclude each other")
    if if_absent:
        return {"IfNoneMatch": "*"}
    return {} if if_version is None else {"IfMatch": if_version}


def _md5_etag(body: bytes) -> str:
    """The ETag S3 gives an object of ``body`` written in one piece (without SSE-KMS/C)."""
    return f'"{hashlib.md5(body, usedforsecurity=False).hexdigest()}"'


def multipart_etag(part_etags: Sequence[str]) -> str | None:
    """The ETag S3 gives the object completed from parts with ``part_etags``, in order.

    ``"<md5 of the parts' binary MD5s>-<number of parts>"`` in quotes; None
    when a part's ETag is no MD5 (encrypted with SSE-KMS or SSE-C, say).
    """
    digests = []
    for etag in part_etags:
        match = _ETAG.match(etag)
        if match is None:
            return None
        digests.append(bytes.fromhex(match.group(1)))
    return f'"{hashlib.md5(b"".join(digests), usedforsecurity=False).hexdigest()}-{len(digests)}"'


class S3ShardStore(ShardStore):
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
        max_parts=_MAX_TASK_PARTS,
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

    def _key(self, key: str) -> str:
        return self.prefix + key

    def _url(self, key: str) -> str:
        return f"s3://{self.bucket}/{self._key(key)}"

    @property
    def endpoint(self) -> str:
        """The endpoint URL the file system talks to (or AWS's default)."""
        client_kwargs = getattr(self.fs, "client_kwargs", None) or {}
        url = getattr(self.fs, "endpoint_url", None) or client_kwargs.get("endpoint_url")
        return str(url) if url else "AWS's default endpoint"

    def _total_attempts(self) -> int | None:
        """Tries botocore makes of each call, as configured (None: botocore's default)."""
        config = getattr(self.fs, "config_kwargs", None) or {}
        retries = config.get("retries") or {}
        if retries.get("total_max_attempts") is not None:
            return int(retries["total_max_attempts"])
        if retries.get("max_attempts") is not None:
            return int(retries["max_attempts"]) + 1  # botocore's max_attempts counts retries
        return None

    def _attempts(self) -> str:
        total = self._total_attempts()
        return f"{total} attempts" if total else "botocore's retries"

    # -- errors --------------------------------------------------------------
    def _fault(self, operation: str, key: str, err: BaseException) -> StorageError:
        """The one-line shardpipe error for ``err``, raised by ``operation`` on ``key``."""
        kind, cause, fix = self._classify(err)
        where = f"S3 {operation} of {self._url(key)} failed"
        return kind(f"{where}: {cause}; {fix}" if fix else f"{where}: {cause}")

    def _classify(self, err: BaseException) -> tuple[type[StorageError], str, str]:
        """``(error class, cause, fix)`` of a failed S3 call."""
        endpoint = self.endpoint
        found = _botocore_any(err, _CREDENTIAL_ERRORS)
        if found is not None:
            return (
                StorageAccessError,
                f"no usable AWS credentials ({_one_line(found)})",
                (_CREDENTIALS_FIX),
            )
        response = _response(err)
        if response is not None:
            code = str(response["Error"].get("Code", ""))
            status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
            message = " ".join(str(response["Error"].get("Message", "")).split())
            cause = f"{code} ({message})" if message and message != code else code
            if code in _BAD_CREDENTIALS:
                return (
                    StorageAccessError,
                    f"S3 rejected the credentials: {cause}",
                    (
                        "check the access key and secret (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY "
                        f"or storage_options 'key'/'secret') and that they are meant for {endpoint}"
                    ),
                )
            if code in _DENIED:
                return StorageAccessError, f"access denied: {cause}", _PERMISSIONS_FIX
            if code == "NoSuchBucket":
                return (
                    StorageAccessError,
                    f"bucket {self.bucket!r} does not exist at {endpoint}",
                    ("create it, or fix the bucket in the URL or endpoint_url in storage_options"),
                )
            if code == "RequestTimeTooSkewed":
                return (
                    StorageAccessError,
                    f"the request was refused: {cause}",
                    ("set this machine's clock right (NTP)"),
                )
            if code in ("501", "NotImplemented") or (status == 501 and not _speaks_s3(response)):
                return (
                    StorageAccessError,
                    f"the endpoint {endpoint} answered {cause}",
                    "it does not implement this S3 operation; check endpoint_url in "
                    "storage_options",
                )
            if (
                code in _TRANSIENT_CODES
                or (code.isdigit() and 500 <= int(code) < 600)
                or status in (429, 500, 502, 503, 504)
            ):
                return (
                    TransientStorageError,
                    f"the server answered {cause}",
                    (f"a transient fault that outlasted {self._attempts()}"),
                )
            return StorageError, f"the server answered {cause}", ""
        found = _botocore_any(err, _CONNECT_ERRORS)
        if found is not None:
            # botocore calls a connection reset mid-request a failure to connect too;
            # a reset means something answered at that address
            if self.reached or _any_named(err, _RESETS) is not None:
                return (
                    TransientStorageError,
                    f"connection failed ({_one_line(found)})",
                    (
                        f"{endpoint} answered before: a transient fault that outlasted "
                        f"{self._attempts()}"
                    ),
                )
            return (
                StorageAccessError,
                f"cannot connect to {endpoint} ({_one_line(found)})",
                (
                    "check endpoint_url in storage_options (or client_kwargs), and that the "
                    "server is up and reachable from here"
                ),
            )
        found = _any_named(err, _TRANSIENT_EXCEPTIONS)
        if found is not None:
            return (
                TransientStorageError,
                _one_line(found),
                (f"a transient fault that outlasted {self._attempts()}"),
            )
        return StorageError, _one_line(err), ""

    def _call(self, method: str, key: str, **kwargs: Any) -> dict[str, Any]:
        try:
            result: dict[str, Any] = self.fs.call_s3(method, Bucket=self.bucket, **kwargs)
        except Exception as err:
            # S3 answers If-Match on an absent key with 404: the condition failed too
            # (NoSuchUpload, for a completion, is not that)
            absent = "IfMatch" in kwargs and _error_code(err) in ("NoSuchKey", "404")
            if absent or _error_code(err) in _CONDITION_CODES:
                raise self._condition_failed(method, key, kwargs) from err
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
        path = f"{self.bucket}/{self._key(key)}"
        try:
            self.fs.cat_file(path, start=0, end=1)
        except Exception as err:
            code = _error_code(err)
            response = _response(err)
            if response is not None and not _speaks_s3(response):
                cause = f"HTTP {code} without an S3 error document or x-amz headers"
                raise StorageAccessError(
                    f"S3 GET of s3://{path} failed: the endpoint {self.endpoint} does not speak "
                    f"S3 ({cause}); check endpoint_url in storage_options"
                ) from err
            if code not in ("NoSuchKey", "InvalidRange"):
                raise self._fault("GET", key, err) from err
        self.reached = True

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

        A conditional put carries a token of its own in the object's metadata
        (``x-amz-meta-shardpipe-put``): when a try whose answer was lost did
        land, the client's retry finds the condition false, and the token
        then tells that the object is this put's, so it succeeded.
        """
        conditions = _conditions(if_absent, if_version)
        body = _join(buffers)
        if conditions:
            self._put_conditionally(key, body, conditions)
        else:
            self._call("put_object", key, Key=self._key(key), Body=body)
        self.fs.invalidate_cache(f"{self.bucket}/{self._key(key)}")

    def _put_conditionally(self, key: str, body: bytes, conditions: dict[str, str]) -> None:
        token = uuid.uuid4().hex
        try:
            self._call(
                "put_object",
                key,
                Key=self._key(key),
                Body=body,
                Metadata={_PUT_TOKEN: token},
                **conditions,
            )
        except ConditionFailedError as err:
            # a try of this very put whose answer was lost, retried by the client
            # (botocore, or aiohttp on a reused connection), finds its own object
            if not self._holds_token(key, token, err):
                raise

    def _holds_token(self, key: str, token: str, err: StorageError) -> bool:
        try:
            head = self._head(key)
        except StorageError as again:
            err.add_note(f"whether this put landed all the same is unknown: {again}")
            return False
        return head is not None and (head.get("Metadata") or {}).get(_PUT_TOKEN) == token

    def _cat(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        path = f"{self.bucket}/{self._key(key)}"
        try:
            data: bytes = self.fs.cat_file(path, start=start, end=end)
        except FileNotFoundError as err:
            if _error_code(err) != "NoSuchBucket":
                raise FileNotFoundError(f"no S3 object s3://{path}: {err}") from err
            raise self._fault("GET", key, err) from err
        except Exception as err:
            raise self._fault("GET", key, err) from err
        self.reached = True
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
            if isinstance(err.__cause__, FileNotFoundError) and _error_code(err) != "NoSuchBucket":
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

    def _uploads(self, prefix: str) -> builtins.list[tuple[str, str]]:
        """``(key, upload id)`` of every open multipart upload whose key starts with ``prefix``.

        Keys are relative to the root. Paginated; listed whole before the
        caller aborts any (aborting while paging would move the markers).
        """
        kwargs: dict[str, Any] = {"Prefix": self._key(prefix), "MaxUploads": self._page_size}
        found: builtins.list[tuple[str, str]] = []
        while True:
            page = self._call("list_multipart_uploads", prefix, **kwargs)
            for upload in page.get("Uploads", []):
                full = str(upload["Key"])
                if full.startswith(self.prefix):
                    found.append((full[len(self.prefix) :], str(upload["UploadId"])))
            if not page.get("IsTruncated"):
                return found
            kwargs["KeyMarker"] = page["NextKeyMarker"]
            kwargs["UploadIdMarker"] = page["NextUploadIdMarker"]

    def _abort_others(self, key: str, keep: str | None) -> int:
        """Abort every open upload of exactly ``key`` but ``keep``; return how many."""
        return sum(
            self._abort(key, self._key(key), upload)
            for found, upload in self._uploads(key)
            if found == key and upload != keep
        )

    def begin_parts(self, key: str, staging: str) -> PartsHandle:
        """Create the multipart upload of ``key``, recorded under ``staging`` before it exists.

        Safe to repeat: other open uploads of ``key`` (a create whose response
        was lost and was retried, an earlier try of this task) are aborted.
        """
        marker = self._marker(staging, key)
        self.put(marker, [f"\n{key}".encode()])  # the key is known before any upload exists
        upload_id = str(self._call("create_multipart_upload", key, Key=self._key(key))["UploadId"])
        self.put(marker, [f"{upload_id}\n{key}".encode()])
        self._abort_others(key, keep=upload_id)
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
        the upload is aborted. When completing fails but the object now at
        the key is the one this completion makes (its response was lost, and
        a retry found the upload gone or the condition no longer true), the
        publish succeeded. Otherwise (a failed condition included) the upload
        stays open for ``abort_parts`` or ``cleanup``.
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
        # the ETag of every part by S3 part number: head and tail get their MD5s
        # until the server's answers replace them (they are the same without SSE-KMS/C)
        etags = {part["PartNumber"]: str(part["ETag"]) for part in parts}
        for number, body in [(_HEAD_PART, head), (_TAIL_PART, tail)]:
            if body:
                etags[number] = _md5_etag(body)
        try:
            for number, body in [(_HEAD_PART, head), (_TAIL_PART, tail)]:
                if body:
                    etags[number] = self._upload(handle, number, body)
                    parts.append({"PartNumber": number, "ETag": etags[number]})
            parts.sort(key=lambda part: part["PartNumber"])
            kwargs = {"Key": self._key(handle.key), "UploadId": handle.upload, **conditions}
            # servers that ignore If-Match on completion (moto) still get this check;
            # AWS enforces the header itself, closing the window after it
            if if_version is not None and self.version(handle.key) != if_version:
                raise self._condition_failed("complete_multipart_upload", handle.key, conditions)
            self._call(
                "complete_multipart_upload", handle.key, MultipartUpload={"Parts": parts}, **kwargs
            )
        except StorageError as err:
            expected = multipart_etag([etags[n] for n in sorted(etags)])
            if not self._completed(handle.key, expected, sum(sizes), err):
                raise
        self.fs.invalidate_cache(f"{self.bucket}/{self._key(handle.key)}")
        self._abort_others(handle.key, keep=None)
        self.delete(self._marker(handle.staging, handle.key))

    def _completed(self, key: str, expected: str | None, size: int, err: StorageError) -> bool:
        """Whether the object at ``key`` is the one a completion that seemed to fail made."""
        if expected is None:
            return False
        try:
            head = self._head(key)
        except StorageError as again:
            err.add_note(f"whether the upload was completed all the same is unknown: {again}")
            return False
        return (
            head is not None
            and str(head.get("ETag")) == expected
            and int(head.get("ContentLength", -1)) == size
        )

    def abort_parts(self, handle: PartsHandle) -> None:
        """Abort the multipart upload of ``handle`` and any other open upload of its key.

        Nothing to do for an upload already gone.
        """
        self._abort(handle.key, self._key(handle.key), handle.upload)
        self._abort_others(handle.key, keep=None)
        self.delete(self._marker(handle.staging, handle.key))

    def _abort(self, key: str, full_key: str, upload_id: str) -> bool:
        try:
            self._call("abort_multipart_upload", key, Key=full_key, UploadId=upload_id)
        except StorageError as err:
            if _error_code(err) in ("NoSuchUpload", "404"):
                return False
            raise
        return True

    def cleanup(self, staging: str, shard_prefix: str) -> int:
        """Abort the multipart uploads the writes with staging prefix ``staging`` left open.

        Every key ``begin_parts`` started an upload of is named by a marker
        under ``staging`` (written before the upload existed). This lists the
        open uploads under ``shard_prefix`` (and those of any marked key
        outside it) and aborts every upload of a marked key, the ones whose
        ids were never heard of included; uploads of other keys are left
        alone. Then the markers are removed.

        Returns
        -------
        int
            How many leftovers were removed: uploads aborted plus markers.
        """
        marked: dict[str, set[str]] = {}  # shard key -> upload ids recorded
        markers = list(self.list(f"{staging}/"))
        for marker in markers:
            upload_id, _, key = (self.get(marker) or b"").decode().partition("\n")
            if key:
                marked.setdefault(key, set()).update([upload_id] if upload_id else [])
        removed = 0
        if marked:
            outside = [key for key in marked if not key.startswith(shard_prefix)]
            found = self._uploads(shard_prefix) + [
                upload for key in outside for upload in self._uploads(key)
            ]
            aborted: set[str] = set()
            for key, upload_id in found:
                if key in marked and upload_id not in aborted:
                    removed += self._abort(key, self._key(key), upload_id)
                    aborted.add(upload_id)
            for key, ids in marked.items():
                for upload_id in ids - aborted:  # not listed (yet): abort by id
                    removed += self._abort(key, self._key(key), upload_id)
        for marker in markers:
            self.delete(marker)
            removed += 1
        return removed
