"""One HTTP request to the GCS JSON API, sent on gcsfs's session with its credentials.

The backend talks to GCS through the ``aiohttp`` session and the credentials
of a ``gcsfs.GCSFileSystem`` (so ``storage_options`` mean what they mean to
gcsfs), but sends the requests itself: it needs the status and the error
document of every answer (a 412, a 404 of a bucket rather than of an
object) and its own tries, which gcsfs's ``_call`` hides behind exceptions
and six retries. Each function here is one request, made once; the caller
(:class:`~shardpipe.storage.gcs.objects.GcsObjects`) classifies and retries.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import aiohttp

from shardpipe.storage.gcs.config import RequestSettings


@dataclass(frozen=True)
class Response:
    """What the server answered.

    Attributes
    ----------
    status : int
        The HTTP status.
    headers : Mapping of str to str
        The response headers.
    body : bytes
        The response body.
    """

    status: int
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> dict[str, Any]:
        """The body as a JSON object (``{}`` when empty)."""
        if not self.body.strip():
            return {}
        loaded = json.loads(self.body)
        return loaded if isinstance(loaded, dict) else {}


def object_path(bucket: str, name: str) -> str:
    """The JSON API path of the object ``name`` in ``bucket``: ``b/<bucket>/o/<name>``."""
    return f"b/{quote(bucket, safe='')}/o/{quote(name, safe='')}"


@dataclass(frozen=True)
class Request:
    """An HTTP request to the JSON API, relative to the endpoint.

    Attributes
    ----------
    method : str
        ``"GET"``, ``"POST"``, ``"DELETE"``.
    path : str
        After ``<endpoint>/storage/v1/`` (or ``<endpoint>/upload/storage/v1/``
        for an upload), e.g. ``b/bucket/o/name``.
    params : Mapping of str to str
        Query parameters.
    headers : Mapping of str to str
        Headers besides the credentials.
    body : bytes, bytearray or None
        The body (an upload's bytes), or None.
    json_body : dict or None
        A JSON body (a compose request), or None.
    metadata : dict or None
        An upload's object resource (name, metadata): the body goes up as a
        ``multipart/related`` upload with it; None for a plain media upload.
    upload : bool
        Whether this is an upload (sent to the upload endpoint).
    """

    method: str
    path: str
    params: Mapping[str, str]
    headers: Mapping[str, str] | None = None
    body: bytes | bytearray | None = None
    json_body: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    upload: bool = False


def _payload(request: Request) -> Any:
    if request.metadata is None or request.body is None:
        return request.body
    writer = aiohttp.MultipartWriter("related")
    writer.append_json(request.metadata)
    writer.append(request.body, {"Content-Type": "application/octet-stream"})
    return writer


async def send(fs: Any, request: Request, settings: RequestSettings) -> Response:
    """Send ``request`` once on the session of the gcsfs file system ``fs``.

    Parameters
    ----------
    fs : gcsfs.GCSFileSystem
        Gives the endpoint, the session (made on its event loop) and the
        credentials (its ``_get_headers`` adds the bearer token and refreshes
        it when due).
    request : Request
        What to send.
    settings : RequestSettings
        The timeouts.

    Returns
    -------
    Response
        Whatever the server answered, error statuses included.

    Raises
    ------
    Exception
        aiohttp's, google-auth's or the standard library's, when no answer
        came (classified by :func:`~shardpipe.storage.gcs.faults.classify_exception`).
    """
    await fs._set_session()
    base = f"{fs._location}/upload/storage/v1/" if request.upload else fs.base
    timeout = aiohttp.ClientTimeout(
        sock_connect=settings.connect_timeout, sock_read=settings.read_timeout
    )
    async with fs.session.request(
        method=request.method,
        url=base + request.path,
        params=fs._get_params(dict(request.params)),
        headers=fs._get_headers(dict(request.headers or {})),
        data=_payload(request),
        json=request.json_body,
        timeout=timeout,
    ) as answer:
        body = await answer.read()
        return Response(answer.status, dict(answer.headers), body)
