"""What a failed S3 call means: transient, a matter of access, or neither.

Every fault that survives the client's own retries (botocore's, s3fs's,
aiohttp's) reaches :class:`~shardpipe.storage.s3.store.S3ShardStore` as whatever
exception the layer it came through raised: a botocore ``ClientError`` with
S3's error document, a botocore or aiohttp connection error, an ``OSError``
that s3fs made of either, each possibly wrapping the others. :func:`classify`
looks down that chain (explicit causes, then implicit contexts) and decides
which shardpipe error it is, because the callers act on the kind:

* :class:`~shardpipe.errors.TransientStorageError` for HTTP 5xx (not 501),
  throttling (``SlowDown``...), timeouts, connections reset or refused after
  the endpoint had answered once, incomplete reads: worth trying again,
  which :class:`~shardpipe.storage.retry.RetryingStore` does;
* :class:`~shardpipe.errors.StorageAccessError` for missing or rejected
  credentials, ``AccessDenied``, ``NoSuchBucket``, an endpoint that cannot be
  reached at all or does not speak S3: never retried, since trying again
  cannot help and the user has something to fix;
* a plain :class:`~shardpipe.errors.StorageError` otherwise.

Along with the kind it gives the cause in one line and the fix, so that the
store's message names the operation, the key, the cause and what to do.
Classes are recognised by name, not imported: botocore, aiohttp and s3fs
change their hierarchies between versions, and none of them is needed to
tell what an exception means.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from shardpipe import advice
from shardpipe.errors import StorageAccessError, StorageError, TransientStorageError


def _chain(err: BaseException) -> Iterator[BaseException]:
    """``err`` and what caused it (explicitly, else implicitly), without cycles."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen and len(seen) < 32:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def error_response(err: BaseException) -> dict[str, Any] | None:
    """The botocore response dict in ``err``'s chain (a ``ClientError``'s), if any.

    Parameters
    ----------
    err : BaseException
        A failed call's exception; its causes and contexts are looked at too.

    Returns
    -------
    dict or None
        The first response with an ``"Error"`` dict, else None.
    """
    for seen in _chain(err):
        response = getattr(seen, "response", None)
        if isinstance(response, dict) and isinstance(response.get("Error"), dict):
            return response
    return None


def error_code(err: BaseException) -> str | None:
    """S3's error code in ``err`` or in what caused it (s3fs translates botocore errors).

    Parameters
    ----------
    err : BaseException
        A failed call's exception.

    Returns
    -------
    str or None
        The code (``"NoSuchKey"``, ``"412"``...), None when no S3 response is
        in the chain or it has no code.
    """
    response = error_response(err)
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


def speaks_s3(response: dict[str, Any]) -> bool:
    """Whether an error response looks like an S3 server's (an error document or x-amz headers).

    Parameters
    ----------
    response : dict
        A botocore error response (see :func:`error_response`).

    Returns
    -------
    bool
        False for a bare HTTP status without ``x-amz-*`` headers: something
        other than S3 answered.
    """
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


def _credentials_fix() -> str:
    """How to pass S3 credentials, in the caller's terms."""
    return (
        "set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (or AWS_PROFILE), or "
        f"{advice.storage_option('key', 'secret')} "
        f"({advice.setting('storage_options', {'anon': True})} for a public bucket)"
    )


_PERMISSIONS_FIX = (
    "use credentials allowed s3:GetObject, s3:PutObject, s3:DeleteObject, s3:ListBucket, "
    "s3:ListBucketMultipartUploads and s3:AbortMultipartUpload on the bucket"
)

# 412, and 409 when a concurrent conditional write to the key won (AWS)
CONDITION_CODES = frozenset({"PreconditionFailed", "412", "ConditionalRequestConflict"})


NO_MULTI_DELETE = frozenset(
    {"NotImplemented", "MethodNotAllowed", "MissingContentMD5", "501", "405"}
)
"""Answers of a server that takes no ``DeleteObjects`` (its keys then go one by one)."""


def refused_deletes(bucket: str, asked: int, refused: list[dict[str, Any]]) -> StorageError:
    """The error for the keys (``Errors``) a ``DeleteObjects`` of ``asked`` keys did not remove.

    Transient when every refusal is (the call is then tried again), a matter
    of access when the first is.
    """
    first = refused[0]
    if all(entry.get("Code") in _TRANSIENT_CODES for entry in refused):
        kind: type[StorageError] = TransientStorageError
    elif first.get("Code") in _DENIED:
        kind = StorageAccessError
    else:
        kind = StorageError
    return kind(
        f"S3 DeleteObjects of {asked} keys failed for {len(refused)} of them, first "
        f"s3://{bucket}/{first.get('Key')}: {first.get('Code')} ({first.get('Message')}); "
        "check that the credentials may delete objects there (s3:DeleteObject) and run the "
        "call again"
    )


def describe_attempts(config_kwargs: dict[str, Any]) -> str:
    """How many tries botocore makes of each call, in words, for the fix of a transient fault.

    Parameters
    ----------
    config_kwargs : dict
        The file system's botocore ``Config`` keywords.

    Returns
    -------
    str
        ``"3 attempts"``, or ``"botocore's retries"`` when its default applies.
    """
    retries = config_kwargs.get("retries") or {}
    total: int | None = None
    if retries.get("total_max_attempts") is not None:
        total = int(retries["total_max_attempts"])
    elif retries.get("max_attempts") is not None:
        total = int(retries["max_attempts"]) + 1  # botocore's max_attempts counts retries
    return f"{total} attempts" if total else "botocore's retries"


def classify(
    err: BaseException, *, endpoint: str, bucket: str, reached: bool, attempts: str
) -> tuple[type[StorageError], str, str]:
    """Tell what kind of fault a failed S3 call is, what caused it and how to fix it.

    Parameters
    ----------
    err : BaseException
        What the call raised (botocore's, s3fs's or aiohttp's exception).
    endpoint : str
        The endpoint the store talks to, as named in the messages.
    bucket : str
        The store's bucket, as named in the messages.
    reached : bool
        Whether the endpoint has answered before: a connection that fails
        after it did is a transient fault, before it the endpoint is wrong or
        down.
    attempts : str
        How many tries the client made (``"3 attempts"``), for the fix of a
        transient fault.

    Returns
    -------
    tuple of (type of StorageError, str, str)
        The error class (:class:`~shardpipe.errors.TransientStorageError`,
        :class:`~shardpipe.errors.StorageAccessError` or
        :class:`~shardpipe.errors.StorageError`), the cause in one line and
        the fix (empty when there is none to give).
    """
    found = _botocore_any(err, _CREDENTIAL_ERRORS)
    if found is not None:
        return (
            StorageAccessError,
            f"no usable AWS credentials ({_one_line(found)})",
            (_credentials_fix()),
        )
    response = error_response(err)
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
                    f"or {advice.storage_option('key', 'secret')}) and that they are meant for "
                    f"{endpoint}"
                ),
            )
        if code in _DENIED:
            return StorageAccessError, f"access denied: {cause}", _PERMISSIONS_FIX
        if code == "NoSuchBucket":
            return (
                StorageAccessError,
                f"bucket {bucket!r} does not exist at {endpoint}",
                "create it, or fix the bucket in the URL or "
                + advice.storage_option("endpoint_url"),
            )
        if code == "RequestTimeTooSkewed":
            return (
                StorageAccessError,
                f"the request was refused: {cause}",
                ("set this machine's clock right (NTP)"),
            )
        if code in ("501", "NotImplemented") or (status == 501 and not speaks_s3(response)):
            return (
                StorageAccessError,
                f"the endpoint {endpoint} answered {cause}",
                "it does not implement this S3 operation; check "
                + advice.storage_option("endpoint_url"),
            )
        if (
            code in _TRANSIENT_CODES
            or (code.isdigit() and 500 <= int(code) < 600)
            or status in (429, 500, 502, 503, 504)
        ):
            return (
                TransientStorageError,
                f"the server answered {cause}",
                (f"a transient fault that outlasted {attempts}"),
            )
        return StorageError, f"the server answered {cause}", ""
    found = _botocore_any(err, _CONNECT_ERRORS)
    if found is not None:
        # botocore calls a connection reset mid-request a failure to connect too;
        # a reset means something answered at that address
        if reached or _any_named(err, _RESETS) is not None:
            return (
                TransientStorageError,
                f"connection failed ({_one_line(found)})",
                (f"{endpoint} answered before: a transient fault that outlasted {attempts}"),
            )
        return (
            StorageAccessError,
            f"cannot connect to {endpoint} ({_one_line(found)})",
            (
                f"check {advice.storage_option('endpoint_url')} (or client_kwargs), and that "
                "the server is up and reachable from here"
            ),
        )
    found = _any_named(err, _TRANSIENT_EXCEPTIONS)
    if found is not None:
        return (
            TransientStorageError,
            _one_line(found),
            (f"a transient fault that outlasted {attempts}"),
        )
    return StorageError, _one_line(err), ""
