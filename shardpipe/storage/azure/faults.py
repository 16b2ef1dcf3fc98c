"""What a failed Azure Blob call means: transient, a matter of access, a failed condition, or else.

The ``azure-storage-blob`` client raises ``azure.core`` exceptions: an
``HttpResponseError`` (or a subclass) with the service's HTTP status and
error code (``x-ms-error-code``) when the service answered, a
``ServiceRequestError`` when the request could not be sent (no connection),
a ``ServiceResponseError`` when the answer could not be read (a reset, a
timeout). :func:`classify_error` sorts them for the callers, which act on the kind:

* :class:`~shardpipe.errors.TransientStorageError`: HTTP 429, 500, 502,
  503, 504 (``ServerBusy``, ``InternalError``, ``OperationTimedOut``...),
  timeouts, connections reset, or refused after the endpoint had answered
  once; :class:`~shardpipe.storage.retry.RetryingStore` tries again;
* :class:`~shardpipe.errors.StorageAccessError`: HTTP 401/403
  (``AuthenticationFailed``, ``AuthorizationFailure``...), a missing
  container (``ContainerNotFound``), an endpoint that cannot be reached at
  all: never retried, the user has something to fix;
* a plain :class:`~shardpipe.errors.StorageError` otherwise.

Failed conditions (:data:`CONDITION_CODES`) are told apart by the store,
which raises :class:`~shardpipe.errors.ConditionFailedError` for them.
"""

from __future__ import annotations

from collections.abc import Iterator

from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    HttpResponseError,
    ServiceRequestError,
    ServiceResponseError,
)

from shardpipe import advice
from shardpipe.errors import StorageAccessError, StorageError, TransientStorageError

CONDITION_CODES = frozenset({"ConditionNotMet", "BlobAlreadyExists", "TargetConditionNotMet"})
"""Error codes of a refused ``If-Match`` (412) or ``If-None-Match: *`` (409 or 412)."""

_TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
_TRANSIENT_CODES = frozenset({"ServerBusy", "InternalError", "OperationTimedOut"})
_DENIED_CODES = frozenset(
    {
        "AuthenticationFailed",
        "AuthorizationFailure",
        "AuthorizationPermissionMismatch",
        "AuthorizationResourceTypeMismatch",
        "AuthorizationProtocolMismatch",
        "AuthorizationSourceIPMismatch",
        "AuthorizationServiceMismatch",
        "InsufficientAccountPermissions",
        "AccountIsDisabled",
        "InvalidAuthenticationInfo",
        "NoAuthenticationInformation",
        "ResourceNotFound",  # what anonymous access to a private account is told
    }
)
_RESETS = frozenset(
    {
        "ConnectionResetError",
        "ConnectionAbortedError",
        "BrokenPipeError",
        "RemoteDisconnected",
        "ProtocolError",
        "ChunkedEncodingError",
        "IncompleteRead",
        "ReadTimeout",
        "ReadTimeoutError",
        "TimeoutError",
    }
)


def _credentials_fix() -> str:
    """What to check of Azure credentials, in the caller's terms."""
    given = advice.storage_option("connection_string", "account_key", "sas_token", "credential")
    return (
        f"check the credentials ({given}) and that they are allowed to read, write, list and "
        "delete blobs in the container"
    )


def _chain(err: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen and len(seen) < 32:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def response_error(err: BaseException) -> HttpResponseError | None:
    """The first ``HttpResponseError`` (the service answered) in ``err``'s chain, if any."""
    for seen in _chain(err):
        if isinstance(seen, HttpResponseError) and getattr(seen, "status_code", None):
            return seen
    return None


def error_code(err: BaseException) -> str | None:
    """The service's error code (``"BlobNotFound"``...) in ``err``'s chain, or None."""
    found = response_error(err)
    code = None if found is None else getattr(found, "error_code", None)
    return None if code is None else str(getattr(code, "value", code))  # str or the SDK's enum


def is_condition_failure(err: BaseException) -> bool:
    """Whether ``err`` is a refused ``If-Match`` / ``If-None-Match`` condition."""
    found = response_error(err)
    return found is not None and (error_code(err) in CONDITION_CODES or found.status_code == 412)


def is_absent(err: BaseException) -> bool:
    """Whether ``err`` says the blob (not the container) does not exist."""
    return error_code(err) == "BlobNotFound"


def _one_line(err: BaseException, limit: int = 240) -> str:
    text = " ".join(str(err).split()) or "no message"
    text = text if len(text) <= limit else text[: limit - 3] + "..."
    return f"{type(err).__name__}: {text}"


def _first_line(err: HttpResponseError) -> str:
    message = str(getattr(err, "reason", "") or "")
    text = " ".join((str(err.message or "").split("\n")[0]).split()) or message
    return text[:200]


def classify_error(
    err: BaseException, *, endpoint: str, container: str, reached: bool
) -> tuple[type[StorageError], str, str]:
    """Tell what kind of fault a failed Azure call is, what caused it and how to fix it.

    Parameters
    ----------
    err : BaseException
        What the call raised.
    endpoint : str
        The account's blob endpoint, for the messages.
    container : str
        The store's container, for the messages.
    reached : bool
        Whether the endpoint has answered before: a connection that fails
        after it did is transient, before it the endpoint is wrong or down.

    Returns
    -------
    tuple of (type of StorageError, str, str)
        The error class, the cause in one line and the fix (empty when there
        is none to give).
    """
    found = response_error(err)
    if found is not None:
        code = error_code(found) or str(found.status_code)
        cause = f"HTTP {found.status_code} {code} ({_first_line(found)})"
        if code == "ContainerNotFound":
            return (
                StorageAccessError,
                f"container {container!r} does not exist at {endpoint}",
                "create it, or fix the container in the URL or the account ("
                + advice.storage_option("account_name", "connection_string")
                + ")",
            )
        if (
            code in _DENIED_CODES
            or found.status_code in (401, 403)
            or (isinstance(found, ClientAuthenticationError))
        ):
            return StorageAccessError, f"access denied: {cause}", _credentials_fix()
        if code in _TRANSIENT_CODES or found.status_code in _TRANSIENT_STATUS:
            return (
                TransientStorageError,
                f"the service answered {cause}",
                "a transient fault that outlasted the retries",
            )
        return StorageError, f"the service answered {cause}", ""
    for seen in _chain(err):
        if isinstance(seen, ClientAuthenticationError):
            return (
                StorageAccessError,
                f"no usable credential ({_one_line(seen)})",
                _credentials_fix(),
            )
    request = next((e for e in _chain(err) if isinstance(e, ServiceRequestError)), None)
    if request is not None and not reached:
        reset = any(type(e).__name__ in _RESETS for e in _chain(err))
        if not reset:
            return (
                StorageAccessError,
                f"cannot connect to {endpoint} ({_one_line(request)})",
                "check the account, account_host or BlobEndpoint of the connection string ("
                + advice.storage_option("connection_string")
                + "), and that the service is up and reachable from here",
            )
    if (
        request is not None
        or any(isinstance(e, ServiceResponseError) for e in _chain(err))
        or any(type(e).__name__ in _RESETS for e in _chain(err))
    ):
        return (
            TransientStorageError,
            _one_line(err),
            "a transient fault that outlasted the retries",
        )
    if isinstance(err, AzureError):
        return StorageError, _one_line(err), ""
    return StorageError, _one_line(err), ""
