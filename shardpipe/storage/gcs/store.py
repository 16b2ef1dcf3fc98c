"""GCS backend: one upload per whole shard, part objects joined by ``compose`` for the rest.

* ``put`` is a single upload: the object appears at its key in one step,
  readers see the old object or the new one.
* A shard written in parts is a set of part objects under the write's
  staging prefix that one ``compose`` publishes atomically (in levels past
  32 parts; :mod:`shardpipe.storage.gcs.parts`).
* Conditional writes: ``ifGenerationMatch=0`` (create-only) and
  ``ifGenerationMatch=<generation>`` with the generation read earlier
  (replace-if-unchanged) on the upload and on the final ``compose``; a
  failed precondition (HTTP 412) is a ``ConditionFailedError``.
* The version of an object is its generation, which GCS changes on every
  write of the key.

A conditional upload whose answer was lost may have landed, and a retry
(the backend's own, or aiohttp's on a reused connection) then finds the
precondition false: each conditional upload carries a random token in its
custom metadata (``shardpipe-put``), and a refused upload whose token is on
the object succeeded, as on S3 (:mod:`shardpipe.storage.s3.store`).

Faults are classified by :mod:`~shardpipe.storage.gcs.faults` from the
HTTP status and GCS's error document; each request is tried a few times
(:mod:`~shardpipe.storage.gcs.config`) and
:class:`~shardpipe.storage.retry.RetryingStore` retries what still fails
transiently. :meth:`GcsShardStore.check_reachable` makes one small request
so that a missing credential, a wrong endpoint or bucket shows before
anything is written.
"""

from __future__ import annotations

import uuid
from collections.abc import Buffer, Iterator, Sequence
from typing import Any

from shardpipe.errors import ConditionFailedError, StorageError
from shardpipe.storage.base import (
    ObjectVersion,
    ShardStore,
    StoreAbilities,
)
from shardpipe.storage.buffers import joined
from shardpipe.storage.gcs import parts
from shardpipe.storage.gcs.config import DEFAULT_SETTINGS, RequestSettings
from shardpipe.storage.gcs.objects import GcsObjects
from shardpipe.storage.gcs.parts import PUT_TOKEN
from shardpipe.storage.http_bodies import send_body
from shardpipe.storage.keys import edge_key
from shardpipe.storage.parts import PartReceipt, PartsHandle


def preconditions(if_absent: bool, if_version: ObjectVersion | None) -> dict[str, str]:
    """The query parameters of ``put``'s conditions: ``ifGenerationMatch`` or nothing.

    Raises
    ------
    ValueError
        If both are given.
    """
    if if_absent and if_version is not None:
        raise ValueError("if_absent and if_version exclude each other")
    if if_absent:
        return {"ifGenerationMatch": "0"}
    return {} if if_version is None else {"ifGenerationMatch": str(if_version)}


class GcsShardStore(ShardStore):
    """Shards as objects under ``bucket/prefix`` on Google Cloud Storage (or its emulator).

    Parameters
    ----------
    fs : gcsfs.GCSFileSystem
        Gives the endpoint, the HTTP session and the credentials.
    root : str
        ``"bucket"`` or ``"bucket/prefix"`` (a ``gs://`` or ``gcs://`` scheme
        is accepted); keys are relative to it.
    settings : RequestSettings, optional
        Timeouts and tries of each request.
    """

    abilities = StoreAbilities(
        parts=True,
        create_only=True,
        replace_if_unchanged=True,
        joins_buffers=True,
        background_puts=True,
        reads_at_once=True,
    )

    def __init__(self, fs: Any, root: str, *, settings: RequestSettings = DEFAULT_SETTINGS) -> None:
        root = root.removeprefix("gs://").removeprefix("gcs://").strip("/")
        bucket, _, prefix = root.partition("/")
        if not bucket:
            raise ValueError(f"GCS root {root!r} names no bucket")
        self.objects = GcsObjects(fs, bucket, f"{prefix}/" if prefix else "", settings)

    def __repr__(self) -> str:
        root = f"{self.objects.bucket}/{self.objects.prefix}".rstrip("/")
        return f"GcsShardStore({root!r})"

    @property
    def bucket(self) -> str:
        """The bucket."""
        return self.objects.bucket

    def check_reachable(self) -> None:
        """Raise unless the bucket answers with these credentials (one listing of one name).

        Called when a store is resolved, so that missing credentials, a
        wrong endpoint or bucket fail before anything is written.

        Raises
        ------
        shardpipe.errors.StorageAccessError
            No credentials, rejected ones, no such bucket, an endpoint that
            cannot be reached.
        shardpipe.errors.StorageError
            Another fault (a transient one outlasted the tries).
        """
        next(self.objects.names("", page_size=1), None)

    # -- conditions ----------------------------------------------------------
    def condition_failed(
        self, operation: str, key: str, params: dict[str, str]
    ) -> ConditionFailedError:
        """The error for a refused conditional ``operation`` of ``key``, with what is there now.

        Parameters
        ----------
        operation : str
            The request refused.
        key : str
            Its key (relative to the root).
        params : dict
            Its precondition (``ifGenerationMatch``).

        Returns
        -------
        shardpipe.errors.ConditionFailedError
            Saying what was expected and what is at ``key`` now.
        """
        wanted = params.get("ifGenerationMatch")
        expected = "no object (create-only write)" if wanted == "0" else f"generation {wanted}"
        try:
            found = self.version(key)
        except StorageError:
            described = "an object whose generation could not be read"
        else:
            described = "no object" if found is None else f"generation {found}"
        return ConditionFailedError(
            f"GCS {operation} of {self.objects.url(key)}: expected {expected}, "
            f"found {described}; nothing was written"
        )

    def check_condition(self, key: str, params: dict[str, str], operation: str) -> None:
        """Raise ``ConditionFailedError`` unless the precondition in ``params`` holds now."""
        wanted = params.get("ifGenerationMatch")
        if wanted is not None and (self.version(key) or "0") != wanted:
            raise self.condition_failed(operation, key, params)

    def holds_token(self, key: str, token: str, err: StorageError) -> bool:
        """Whether the object at ``key`` carries ``token``: a write that seemed to fail landed.

        Parameters
        ----------
        key : str
            The key written.
        token : str
            The write's own token (custom metadata ``shardpipe-put``).
        err : shardpipe.errors.StorageError
            The failure; a note is added when the object cannot be read.

        Returns
        -------
        bool
            True when the object at ``key`` is this write's.
        """
        try:
            found = self.objects.metadata(key)
        except StorageError as again:
            err.add_note(f"whether this write landed all the same is unknown: {again}")
            return False
        return found is not None and (found.get("metadata") or {}).get(PUT_TOKEN) == token

    # -- whole objects -------------------------------------------------------
    def put(
        self,
        key: str,
        buffers: Sequence[Buffer],
        *,
        if_absent: bool = False,
        if_version: ObjectVersion | None = None,
    ) -> None:
        """Publish the concatenation of ``buffers`` at ``key`` with one upload.

        A conditional put carries a token of its own in the object's metadata:
        when a try whose answer was lost did land, the retry finds the
        precondition false, and the token then tells that the object is this
        put's, so it succeeded.
        """
        params = preconditions(if_absent, if_version)
        body = send_body(buffers)
        if not params:
            self.objects.upload(key, body)
            return
        token = uuid.uuid4().hex
        try:
            answer = self.objects.upload(key, body, params=params, metadata={PUT_TOKEN: token})
            if answer.status == 412:
                raise self.condition_failed("upload", key, params)
        except StorageError as err:
            if not self.holds_token(key, token, err):
                raise

    def joined_body(self, buffers: Sequence[Buffer]) -> Buffer:
        """The :class:`~shardpipe.storage.http_bodies.SendBody` :meth:`put` sends as it is."""
        return send_body(buffers)

    def get(self, key: str) -> bytes | None:
        """Return the bytes at ``key``, or ``None`` when absent."""
        return self.objects.media(key)

    def get_range(self, key: str, start: int, stop: int) -> bytes:
        """Return ``[start, stop)`` of the object at ``key`` with one ranged GET."""
        edge_key(key, self)
        if not 0 <= start <= stop:
            raise ValueError(f"invalid byte range [{start}, {stop}) of {key!r}")
        if start == stop:
            if self.objects.metadata(key) is None:
                raise FileNotFoundError(f"no GCS object {self.objects.url(key)}")
            return b""
        data = self.objects.media(key, start, stop)
        if data is None:
            raise FileNotFoundError(f"no GCS object {self.objects.url(key)}")
        return data

    def size(self, key: str) -> int | None:
        """Return the size of the object at ``key``, or ``None`` when absent."""
        found = self.objects.metadata(key)
        return None if found is None else int(found["size"])

    def version(self, key: str) -> ObjectVersion | None:
        """Return the generation of the object at ``key``, or ``None`` when absent."""
        found = self.objects.metadata(key)
        return None if found is None else str(found["generation"])

    def delete(self, key: str) -> None:
        """Remove ``key`` if present."""
        self.objects.delete(key)

    def delete_many(self, keys: Sequence[str]) -> None:
        """Remove each of ``keys`` present, several requests at a time (every key checked first)."""
        self.objects.delete_many(keys)

    def list(self, prefix: str) -> Iterator[str]:
        """Iterate over the keys that start with ``prefix``, in string order, page by page."""
        edge_key(prefix, self, prefix=True)
        return self.objects.names(prefix)

    # -- parts ---------------------------------------------------------------
    def begin_parts(self, key: str, staging: str, *, any_order: bool = False) -> PartsHandle:
        """Start writing ``key`` in parts (nothing is sent: part objects appear as written).

        Parts lie by their numbers, whatever ``any_order`` says.
        """
        edge_key(key, self)
        edge_key(staging, self, prefix=True)
        return parts.begin_parts(key, staging)

    def _check_handle(self, handle: PartsHandle) -> None:
        edge_key(handle.key, self)
        edge_key(handle.upload, self)
        edge_key(handle.staging, self, prefix=True)

    def write_part(
        self, handle: PartsHandle, number: int, buffers: Sequence[Buffer]
    ) -> PartReceipt:
        """Upload part ``number`` as an object under the write's staging prefix."""
        self._check_handle(handle)
        return parts.write_part(self.objects, handle, number, joined(buffers))

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
        """Publish ``head + parts + tail`` at the key with ``compose``, then delete the parts."""
        self._check_handle(handle)
        params = preconditions(if_absent, if_version)
        parts.finish_parts(self, handle, receipts, head, tail, params)

    def abort_parts(self, handle: PartsHandle) -> None:
        """Delete the part objects of ``handle`` (nothing to do when they are gone)."""
        self._check_handle(handle)
        parts.abort_parts(self.objects, handle)

    def discard_staging(self, staging: str) -> None:
        """Delete whatever is left under the staging prefix of a write that succeeded."""
        edge_key(staging, self, prefix=True)
        parts.cleanup(self.objects, staging)

    def cleanup(self, staging: str, shard_prefix: str) -> int:
        """Delete every part object the writes with staging prefix ``staging`` left.

        Part objects live under ``staging`` only, so ``shard_prefix`` is not
        looked at: nothing of a write in parts is ever under it before the
        ``compose`` that publishes a whole shard.
        """
        edge_key(staging, self, prefix=True)
        edge_key(shard_prefix, self, prefix=True)
        return parts.cleanup(self.objects, staging)
