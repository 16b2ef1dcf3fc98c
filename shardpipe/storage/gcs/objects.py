"""GCS objects under a root, as the backend uses them: each request tried, classified, named.

:class:`GcsObjects` knows a bucket and a key prefix and makes the JSON API
requests the backend needs (read an object or a range of it, its metadata,
upload, compose, delete, list), each tried :attr:`RequestSettings.attempts
<shardpipe.storage.gcs.config.RequestSettings.attempts>` times on transient
faults with jittered backoff. What still fails is a
:class:`~shardpipe.errors.StorageError` naming the operation, the object
(``gs://bucket/key``), the cause and the fix, in one line, with the
original exception (if any) as ``__cause__``.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import quote

import fsspec.asyn

from shardpipe.errors import StorageError, TransientStorageError
from shardpipe.storage.each import call_each
from shardpipe.storage.gcs import faults
from shardpipe.storage.gcs.config import DEFAULT_SETTINGS, RequestSettings
from shardpipe.storage.gcs.requests import Request, Response, object_path, send
from shardpipe.storage.keys import edge_key

_OBJECT_FIELDS = "name,size,generation,metadata"


class GcsObjects:
    """The objects under ``bucket/prefix`` of a GCS endpoint.

    Parameters
    ----------
    fs : gcsfs.GCSFileSystem
        Its endpoint, session and credentials are used (not its retries).
    bucket : str
        The bucket.
    prefix : str
        Key prefix of the root, ``""`` or ending in ``/``.
    settings : RequestSettings
        Timeouts and tries.
    """

    def __init__(
        self, fs: Any, bucket: str, prefix: str, settings: RequestSettings = DEFAULT_SETTINGS
    ) -> None:
        self.fs = fs
        self.bucket = bucket
        self.prefix = prefix
        self.settings = settings
        # whether the endpoint has answered: a connection refused later is a
        # transient fault, before it the endpoint is wrong or down (pickled along)
        self.reached = False

    @property
    def endpoint(self) -> str:
        """The endpoint URL requests go to."""
        return str(self.fs._location)

    def name(self, key: str) -> str:
        """The object name in the bucket of ``key`` (relative to the root), checked.

        Raises
        ------
        shardpipe.errors.UnsafeKeyError
            If ``key`` could lead outside the root (``..``, ``//``...).
        """
        return self.prefix + edge_key(key, self)

    def url(self, key: str) -> str:
        """``gs://bucket/<prefix><key>``, for messages (not checked)."""
        return f"gs://{self.bucket}/{self.prefix}{key}"

    def __repr__(self) -> str:
        return f"GcsObjects({f'{self.bucket}/{self.prefix}'.rstrip('/')!r})"

    # -- requests ------------------------------------------------------------
    def fault(
        self,
        operation: str,
        key: str,
        *,
        answer: Response | None = None,
        err: BaseException | None = None,
        bucket_level: bool = False,
    ) -> StorageError:
        """The one-line shardpipe error for a failed ``operation`` on ``key``.

        Parameters
        ----------
        operation : str
            What was asked (``"upload"``, ``"compose"``...).
        key : str
            The key it was about (relative to the root).
        answer : Response, optional
            The server's error answer, if one came.
        err : BaseException, optional
            What was raised when no answer came.
        bucket_level : bool
            Whether a 404 means that the bucket is missing.

        Returns
        -------
        shardpipe.errors.StorageError
            Of the kind :mod:`~shardpipe.storage.gcs.faults` tells.
        """
        if answer is not None:
            kind, cause, fix = faults.classify_status(
                answer.status,
                answer.body,
                endpoint=self.endpoint,
                bucket=self.bucket,
                bucket_level=bucket_level,
            )
        else:
            assert err is not None
            kind, cause, fix = faults.classify_exception(
                err, endpoint=self.endpoint, reached=self.reached
            )
        if kind is TransientStorageError:
            fix = f"{fix} that outlasted {self.settings.attempts} attempts"
        where = f"GCS {operation} of {self.url(key)} failed"
        return kind(f"{where}: {cause}; {fix}" if fix else f"{where}: {cause}")

    async def _request(
        self,
        operation: str,
        key: str,
        request: Request,
        accept: Sequence[int],
        bucket_level: bool,
    ) -> Response:
        rng = random.Random()
        for attempt in range(1, self.settings.attempts + 1):
            try:
                answer = await send(self.fs, request, self.settings)
            except asyncio.CancelledError:
                raise
            except Exception as err:
                error = self.fault(operation, key, err=err)
                if attempt == self.settings.attempts or type(error) is not TransientStorageError:
                    raise error from err
            else:
                self.reached = True
                if answer.status in accept:
                    return answer
                error = self.fault(operation, key, answer=answer, bucket_level=bucket_level)
                if attempt == self.settings.attempts or type(error) is not TransientStorageError:
                    raise error
            await asyncio.sleep(rng.uniform(0, self.settings.first_delay * 2 ** (attempt - 1)))
        raise AssertionError("unreachable")  # pragma: no cover

    def request(
        self,
        operation: str,
        key: str,
        request: Request,
        *,
        accept: Sequence[int] = (200, 204),
        bucket_level: bool = False,
    ) -> Response:
        """Send ``request`` about ``key``; return the first answer whose status is in ``accept``.

        Parameters
        ----------
        operation : str
            Its name in messages.
        key : str
            The key it is about (relative to the root), for messages.
        request : Request
            What to send.
        accept : sequence of int
            Statuses handed back (a 404 or 412 the caller handles, say).
        bucket_level : bool
            Whether a 404 not in ``accept`` means that the bucket is missing.

        Returns
        -------
        Response
            The answer.

        Raises
        ------
        shardpipe.errors.StorageError
            Any other answer, or no answer, after the tries.
        """
        answer: Response = fsspec.asyn.sync(
            self.fs.loop, self._request, operation, key, request, tuple(accept), bucket_level
        )
        return answer

    # -- objects ---------------------------------------------------------------
    def metadata(self, key: str) -> dict[str, Any] | None:
        """The object resource of ``key`` (name, size, generation, metadata), or None."""
        path = object_path(self.bucket, self.name(key))
        answer = self.request(
            "GET metadata", key, Request("GET", path, {"fields": _OBJECT_FIELDS}), accept=(200, 404)
        )
        return None if answer.status == 404 else answer.json()

    def media(self, key: str, start: int | None = None, stop: int | None = None) -> bytes | None:
        """The bytes of ``key`` (``[start, stop)`` of them, when given), or None when absent."""
        headers = {} if start is None or stop is None else {"Range": f"bytes={start}-{stop - 1}"}
        path = object_path(self.bucket, self.name(key))
        answer = self.request(
            "GET", key, Request("GET", path, {"alt": "media"}, headers), accept=(200, 206, 404)
        )
        return None if answer.status == 404 else answer.body

    def upload(
        self,
        key: str,
        body: bytes | bytearray,
        *,
        params: dict[str, str] | None = None,
        metadata: dict[str, str] | None = None,
    ) -> Response:
        """Upload ``body`` as the object ``key`` in one request; a 412 is handed back.

        Parameters
        ----------
        key : str
            Where (relative to the root).
        body : bytes or bytearray
            The object's bytes (a :class:`~shardpipe.storage.http_bodies.SendBody`
            goes to the socket without a copy).
        params : dict, optional
            Preconditions (``ifGenerationMatch``).
        metadata : dict, optional
            Custom metadata of the object (sent as a multipart upload).

        Returns
        -------
        Response
            The new object's resource (200), or the 412 of a failed precondition.
        """
        name = self.name(key)
        resource: dict[str, Any] = {"name": name, "contentType": "application/octet-stream"}
        if metadata:
            resource["metadata"] = metadata
        request = Request(
            "POST",
            f"b/{quote(self.bucket, safe='')}/o",
            {"uploadType": "multipart" if metadata else "media", "name": name, **(params or {})},
            None if metadata else {"Content-Type": "application/octet-stream"},
            body=body,
            metadata=resource if metadata else None,
            upload=True,
        )
        return self.request("upload", key, request, accept=(200, 412), bucket_level=True)

    def compose(
        self,
        key: str,
        sources: Sequence[tuple[str, str | None]],
        *,
        params: dict[str, str] | None = None,
        metadata: dict[str, str] | None = None,
    ) -> Response:
        """Compose ``sources`` (keys, with generations or None) into ``key``; a 412 is handed back.

        At most 32 sources (GCS's limit per request).
        """
        objects: list[dict[str, Any]] = []
        for source, generation in sources:
            entry: dict[str, Any] = {"name": self.name(source)}
            if generation is not None:
                entry["generation"] = generation
            objects.append(entry)
        destination: dict[str, Any] = {"contentType": "application/octet-stream"}
        if metadata:
            destination["metadata"] = metadata
        request = Request(
            "POST",
            f"{object_path(self.bucket, self.name(key))}/compose",
            dict(params or {}),
            json_body={"sourceObjects": objects, "destination": destination},
        )
        # a 404 may mean a missing source (or source generation), not only the bucket
        return self.request("compose", key, request, accept=(200, 412))

    def delete(self, key: str) -> None:
        """Remove ``key`` if present."""
        self.request(
            "DELETE",
            key,
            Request("DELETE", object_path(self.bucket, self.name(key)), {}),
            accept=(200, 204, 404),
        )

    def delete_many(self, keys: Sequence[str]) -> None:
        """Remove every one of ``keys`` present, ``settings.concurrency`` requests at a time.

        Every key is checked before any request. The first failure stops the
        requests not yet sent and is raised once those under way ended.
        """
        for key in keys:
            self.name(key)
        call_each(self.delete, keys, self.settings.concurrency)

    def names(self, prefix: str, *, page_size: int = 1000) -> Iterator[str]:
        """Iterate over the keys (relative to the root) that start with ``prefix``, page by page.

        GCS lists object names in lexicographic (byte) order, which for UTF-8
        names is the order of Python strings.
        """
        full = self.prefix + edge_key(prefix, self, prefix=True)
        token: str | None = None
        while True:
            params = {
                "prefix": full,
                "maxResults": str(page_size),
                "fields": "items(name),nextPageToken",
            }
            if token:
                params["pageToken"] = token
            path = f"b/{quote(self.bucket, safe='')}/o"
            page = self.request("list", prefix, Request("GET", path, params), bucket_level=True)
            listed = page.json()
            for item in listed.get("items", []):
                yield str(item["name"])[len(self.prefix) :]
            token = listed.get("nextPageToken")
            if not token:
                return
