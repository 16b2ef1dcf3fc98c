"""What a failed GCS request means: transient, a matter of access, or neither.

A request of the GCS backend fails in one of two ways: the server answers
with an HTTP status and (usually) a JSON error document
(``{"error": {"code": 403, "message": ..., "errors": [{"reason": ...}]}}``),
or no answer comes (aiohttp's connection errors and timeouts, google-auth's
errors while fetching a token). :func:`classify_status` and
:func:`classify_exception` sort each into the shardpipe error the callers act
on:

* :class:`~shardpipe.errors.TransientStorageError` for HTTP 408, 429 and 5xx
  (not 501), timeouts, connections reset or refused after the endpoint had
  answered once, incomplete payloads: worth trying again, which the backend
  does a few times itself and :class:`~shardpipe.storage.retry.RetryingStore`
  does above it;
* :class:`~shardpipe.errors.StorageAccessError` for missing or rejected
  credentials (401, a token that cannot be fetched), permissions (403), a
  bucket that does not exist, an endpoint that cannot be reached at all:
  never retried, since the user has something to fix;
* a plain :class:`~shardpipe.errors.StorageError` otherwise.

A failed precondition (HTTP 412) is none of these: the backend turns it into
a :class:`~shardpipe.errors.ConditionFailedError` itself.

Exception classes are recognised by name, not imported, as in
:mod:`shardpipe.storage.s3.faults`: aiohttp and google-auth change their
hierarchies between versions.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from shardpipe import advice
from shardpipe.errors import StorageAccessError, StorageError, TransientStorageError

TRANSIENT_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
"""HTTP statuses worth trying again (Google's guidance for its JSON API)."""


def credentials_fix() -> str:
    """How to pass GCS credentials, in the caller's terms."""
    return (
        f"set {advice.storage_option('token')} as gcsfs takes it (a service-account JSON "
        "file, 'google_default' after `gcloud auth application-default login`, 'cloud' on "
        "Google Cloud, 'anon' for a public bucket or an emulator)"
    )


PERMISSIONS_FIX = (
    "use credentials allowed storage.objects.create, get, list and delete on the bucket "
    "(the role Storage Object Admin has them)"
)

_CREDENTIAL_ERRORS = frozenset(
    {"DefaultCredentialsError", "RefreshError", "TransportError", "MalformedError"}
)
_TRANSIENT_EXCEPTIONS = frozenset(
    {
        "ServerDisconnectedError",
        "ClientOSError",
        "ClientPayloadError",
        "ClientConnectionResetError",
        "ServerTimeoutError",
        "ConnectionTimeoutError",
        "SocketTimeoutError",
        "TimeoutError",
        "ConnectionResetError",
        "ConnectionAbortedError",
        "BrokenPipeError",
        "IncompleteRead",
        "ContentLengthError",
        "TransferEncodingError",
    }
)
_CONNECT_ERRORS = frozenset(
    {"ClientConnectorError", "ClientConnectorDNSError", "ConnectionRefusedError"}
)


def _chain(err: BaseException) -> Iterator[BaseException]:
    """``err`` and what caused it (explicitly, else implicitly), without cycles."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen and len(seen) < 32:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _named(err: BaseException, names: frozenset[str]) -> BaseException | None:
    """The first exception of ``err``'s chain with a class (or base class) among ``names``."""
    for seen in _chain(err):
        if any(cls.__name__ in names for cls in type(seen).__mro__):
            return seen
    return None


def one_line(err: BaseException, limit: int = 240) -> str:
    """``"<class>: <message>"`` of ``err`` on one line, cut to ``limit`` characters."""
    text = " ".join(str(err).split()) or "no message"
    text = text if len(text) <= limit else text[: limit - 3] + "..."
    return f"{type(err).__name__}: {text}"


def error_text(status: int, body: bytes) -> str:
    """The server's own words for a failed request: its error message and reason.

    Parameters
    ----------
    status : int
        The HTTP status.
    body : bytes
        The response body: GCS's JSON error document, or plain text.

    Returns
    -------
    str
        ``"HTTP 403 (reason: message)"``, one line.
    """
    message = ""
    try:
        error = json.loads(body)["error"]
        message = str(error.get("message", ""))
        reasons = [str(e.get("reason", "")) for e in error.get("errors", []) if e.get("reason")]
        if reasons and reasons[0] not in message:
            message = f"{reasons[0]}: {message}"
    except (ValueError, KeyError, TypeError, AttributeError):
        message = body[:200].decode(errors="replace")
    message = " ".join(message.split())
    return f"HTTP {status} ({message})" if message else f"HTTP {status}"


def classify_status(
    status: int, body: bytes, *, endpoint: str, bucket: str, bucket_level: bool
) -> tuple[type[StorageError], str, str]:
    """Tell what kind of fault an HTTP error answer is, its cause and its fix.

    Parameters
    ----------
    status : int
        The HTTP status (not 412, which the caller handles).
    body : bytes
        The response body.
    endpoint : str
        The endpoint, as named in the messages.
    bucket : str
        The bucket, as named in the messages.
    bucket_level : bool
        Whether a 404 can only mean that the bucket is missing (an upload,
        a compose, a listing), not the object.

    Returns
    -------
    tuple of (type of StorageError, str, str)
        The error class, the cause in one line and the fix (empty when there
        is none to give).
    """
    said = error_text(status, body)
    if status == 401:
        return StorageAccessError, f"GCS rejected the credentials: {said}", credentials_fix()
    if status == 403:
        return StorageAccessError, f"access denied: {said}", PERMISSIONS_FIX
    if status == 404 and bucket_level:
        return (
            StorageAccessError,
            f"bucket {bucket!r} does not exist at {endpoint} ({said})",
            "create it, or fix the bucket in the URL or " + advice.storage_option("endpoint_url"),
        )
    if status == 501:
        return (
            StorageAccessError,
            f"the endpoint {endpoint} answered {said}",
            "it does not implement this GCS operation; check "
            + advice.storage_option("endpoint_url"),
        )
    if status in TRANSIENT_STATUSES or 500 <= status < 600:
        return TransientStorageError, f"the server answered {said}", "a transient fault"
    return StorageError, f"the server answered {said}", ""


def classify_exception(
    err: BaseException, *, endpoint: str, reached: bool
) -> tuple[type[StorageError], str, str]:
    """Tell what kind of fault a request that got no answer is, its cause and its fix.

    Parameters
    ----------
    err : BaseException
        What the request raised (aiohttp's, google-auth's or the standard
        library's exception).
    endpoint : str
        The endpoint, as named in the messages.
    reached : bool
        Whether the endpoint has answered before: a connection refused after
        it did is a transient fault, before it the endpoint is wrong or down.

    Returns
    -------
    tuple of (type of StorageError, str, str)
        The error class, the cause in one line and the fix.
    """
    found = _named(err, _CREDENTIAL_ERRORS)
    if found is not None:
        return (
            StorageAccessError,
            f"no usable Google credentials ({one_line(found)})",
            (credentials_fix()),
        )
    found = _named(err, _CONNECT_ERRORS)
    if found is not None and not reached:
        return (
            StorageAccessError,
            f"cannot connect to {endpoint} ({one_line(found)})",
            f"check {advice.storage_option('endpoint_url')}, and that the server is up and "
            "reachable",
        )
    found = found or _named(err, _TRANSIENT_EXCEPTIONS)
    if found is not None:
        return TransientStorageError, one_line(found), "a transient fault"
    return StorageError, one_line(err), ""
