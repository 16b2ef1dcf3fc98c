"""Azure Blob Storage backend: one blob put per whole shard, one block list per shard in parts.

* ``put`` is one ``Put Blob`` (the SDK turns a body past
  :data:`SINGLE_PUT_BYTES` into staged blocks and one ``Put Block List``):
  the blob appears at its key in one step, readers see the old one or the
  new one.
* A shard written in parts is a set of blocks staged by many tasks and
  committed by one ``Put Block List`` (:mod:`shardpipe.storage.azure.blocks`);
  a part may be copied by the service from a range of an existing blob
  (``Put Block From URL``, authorized by a short SAS or the bearer token).
* Conditional writes: ``If-None-Match: *`` (create-only) and ``If-Match``
  with the ETag read earlier (replace-if-unchanged), on both requests; a
  refusal (HTTP 409 ``BlobAlreadyExists``, 412 ``ConditionNotMet``, or 404
  for ``If-Match`` on an absent blob) is a ``ConditionFailedError``.
* Reads: ``Get Blob`` with ``Range: bytes=start-end``. Azure serves no
  suffix ranges (``bytes=-N``), so nothing here asks for one; readers of a
  shard whose index is at the end need its size first (zarr-python on
  adlfs asks for a suffix range and fails), which is why writes to Azure
  put the index at the start unless told otherwise.

A conditional put whose response was lost may have landed; its retry then
finds the condition false. Each conditional put and every commit carries a
random token in the blob's metadata (``shardpipe_put``), and a refused
request whose token is on the blob succeeded.

The SDK's own retries are off and its timeouts short
(:data:`~shardpipe.storage.azure.options.CLIENT_DEFAULTS`); every fault is a
``StorageError`` naming the operation, the blob's URL, the cause and the fix,
of the kind :func:`~shardpipe.storage.azure.faults.classify_error` tells, and
:class:`~shardpipe.storage.retry.RetryingStore` retries the transient ones.
"""

from __future__ import annotations

import datetime
import threading
import uuid
from collections.abc import Buffer, Callable, Iterator, Sequence
from typing import Any, TypeVar

from azure.core import MatchConditions
from azure.storage.blob import BlobBlock, BlobSasPermissions, ContainerClient, generate_blob_sas

from shardpipe.errors import ConditionFailedError, StorageError
from shardpipe.storage.azure import blocks, faults
from shardpipe.storage.azure.options import service_client
from shardpipe.storage.base import (
    ObjectVersion,
    ShardStore,
    StoreAbilities,
)
from shardpipe.storage.buffers import joined
from shardpipe.storage.each import call_each
from shardpipe.storage.keys import edge_key
from shardpipe.storage.parts import PartReceipt, PartsHandle

T = TypeVar("T")

TOKEN = "shardpipe_put"
"""Metadata name of a conditional put's or a commit's own token."""
COPY_SOURCE_SAS_SECONDS = 3600
"""How long the SAS that lets the service read a copy's source lasts (shared-key accounts)."""
DELETES_AT_ONCE = 16
"""Requests :meth:`AzureShardStore.delete_many` keeps in flight (one blob a request)."""

SINGLE_PUT_BYTES = 256 * 2**20
"""Largest body sent as one ``Put Blob`` (larger ones go up as blocks, then one commit)."""


def _conditions(if_absent: bool, if_version: ObjectVersion | None) -> dict[str, Any]:
    if if_absent and if_version is not None:
        raise ValueError("if_absent and if_version exclude each other")
    if if_absent:
        return {"match_condition": MatchConditions.IfMissing}
    if if_version is not None:
        return {"etag": if_version, "match_condition": MatchConditions.IfNotModified}
    return {}


class AzureShardStore(ShardStore):
    """Shards as blobs under ``container/prefix`` in an Azure storage account (or Azurite).

    Parameters
    ----------
    options : dict
        ``storage_options`` as adlfs takes them (see
        :mod:`shardpipe.storage.azure.options`); the client is made from them
        in each process (the store pickles its options, not its client).
    root : str
        ``"container"`` or ``"container/prefix"`` (an ``az://``, ``abfs://``
        or ``abfss://`` scheme is accepted); keys are relative to it.
    """

    abilities = StoreAbilities(
        parts=True,
        create_only=True,
        replace_if_unchanged=True,
        joins_buffers=True,
        copy_range=True,
        max_parts=blocks.MAX_TASK_PARTS,
        background_puts=True,
        reads_at_once=True,
        suffix_ranges=False,
    )

    def __init__(self, options: dict[str, Any], root: str) -> None:
        for scheme in ("az://", "abfs://", "abfss://"):
            root = root.removeprefix(scheme)
        container, _, prefix = root.strip("/").partition("/")
        if not container:
            raise ValueError(f"Azure root {root!r} names no container")
        self.options = dict(options)
        self.container = container
        self.prefix = f"{prefix.strip('/')}/" if prefix.strip("/") else ""
        # whether the endpoint has answered: a connection refused later is a
        # transient fault, before it the endpoint is wrong or down (pickled along)
        self.reached = False
        self._client: ContainerClient | None = None
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_client"] = None
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"AzureShardStore({f'{self.container}/{self.prefix}'.rstrip('/')!r})"

    @property
    def client(self) -> ContainerClient:
        """The container's client, made on first use in this process."""
        with self._lock:
            if self._client is None:
                self._client = service_client(self.options).get_container_client(self.container)
            return self._client

    @property
    def endpoint(self) -> str:
        """The account's blob endpoint."""
        return str(self.client.primary_endpoint).rsplit("/", 1)[0]

    def full_key(self, key: str) -> str:
        """The blob name of ``key`` (relative to the root), checked to stay inside it."""
        return self.prefix + edge_key(key, self)

    def _url(self, key: str) -> str:
        return f"az://{self.container}/{self.prefix}{key}"  # for messages: not checked

    # -- errors --------------------------------------------------------------
    def fault(self, operation: str, key: str, err: BaseException) -> StorageError:
        """The one-line shardpipe error for ``err``, raised by ``operation`` on ``key``."""
        kind, cause, fix = faults.classify_error(
            err, endpoint=self.endpoint, container=self.container, reached=self.reached
        )
        where = f"Azure {operation} of {self._url(key)} failed"
        return kind(f"{where}: {cause}; {fix}" if fix else f"{where}: {cause}")

    def _call(self, operation: str, key: str, request: Callable[[], T]) -> T:
        try:
            result = request()
        except Exception as err:
            raise self.fault(operation, key, err) from err
        self.reached = True
        return result

    def _conditional(
        self, operation: str, key: str, conditions: dict[str, Any], request: Callable[[], T]
    ) -> T:
        try:
            return self._call(operation, key, request)
        except StorageError as err:
            absent = "etag" in conditions and faults.is_absent(err)
            if absent or faults.is_condition_failure(err):
                raise self.condition_failed(operation, key, conditions) from err
            raise

    def condition_failed(
        self, operation: str, key: str, conditions: dict[str, Any]
    ) -> ConditionFailedError:
        """The error for a refused conditional ``operation`` of ``key``, with what is there now."""
        if conditions.get("match_condition") == MatchConditions.IfMissing:
            expected = "no blob (create-only write)"
        else:
            expected = f"version {conditions.get('etag')}"
        try:
            found = self.version(key)
        except StorageError:
            described = "a blob whose version could not be read"
        else:
            described = "no blob" if found is None else f"version {found}"
        return ConditionFailedError(
            f"Azure {operation} of {self._url(key)}: expected {expected}, "
            f"found {described}; nothing was written"
        )

    def holds_token(self, key: str, token: str, err: StorageError) -> bool:
        """Whether the blob at ``key`` carries ``token`` in its metadata (see the module)."""
        try:
            properties = self._properties(key)
        except StorageError as again:
            err.add_note(f"whether this request landed all the same is unknown: {again}")
            return False
        return properties is not None and (properties.metadata or {}).get(TOKEN) == token

    def check_reachable(self, key: str = "zarr.json") -> None:
        """Raise unless the container answers with these credentials (one ``Get Blob Properties``).

        An absent ``key`` is fine; a missing container, rejected or missing
        credentials, or an endpoint that cannot be reached raise
        :class:`~shardpipe.errors.StorageAccessError` before anything is written.
        """
        self._properties(key)

    # -- whole objects -------------------------------------------------------
    def put(
        self,
        key: str,
        buffers: Sequence[Buffer],
        *,
        if_absent: bool = False,
        if_version: ObjectVersion | None = None,
    ) -> None:
        """Publish the concatenation of ``buffers`` at ``key`` with one ``Put Blob``."""
        conditions = _conditions(if_absent, if_version)
        body = joined(buffers)
        blob = self.client.get_blob_client(self.full_key(key))
        if not conditions:
            self._call("Put Blob", key, lambda: blob.upload_blob(body, overwrite=True))
            return
        token = uuid.uuid4().hex
        try:
            self._conditional(
                "Put Blob",
                key,
                conditions,
                # overwrite=False is the SDK's If-None-Match: *
                lambda: blob.upload_blob(
                    body,
                    overwrite=not if_absent,
                    metadata={TOKEN: token},
                    **({} if if_absent else conditions),
                ),
            )
        except ConditionFailedError as err:
            if not self.holds_token(key, token, err):
                raise

    def get(self, key: str) -> bytes | None:
        """Return the bytes at ``key``, or ``None`` when absent."""
        blob = self.client.get_blob_client(self.full_key(key))
        try:
            return self._call("Get Blob", key, lambda: blob.download_blob().readall())
        except StorageError as err:
            if faults.is_absent(err):
                return None
            raise

    def get_range(self, key: str, start: int, stop: int) -> bytes:
        """Return ``[start, stop)`` of the blob at ``key`` (``Range: bytes=start-(stop-1)``)."""
        blob = self.client.get_blob_client(self.full_key(key))
        if not 0 <= start <= stop:
            raise ValueError(f"invalid byte range [{start}, {stop}) of {key!r}")
        if start == stop:
            if self.size(key) is None:
                raise FileNotFoundError(f"no Azure blob {self._url(key)}")
            return b""
        try:
            return self._call(
                "Get Blob",
                key,
                lambda: blob.download_blob(offset=start, length=stop - start).readall(),
            )
        except StorageError as err:
            if faults.is_absent(err):
                raise FileNotFoundError(f"no Azure blob {self._url(key)}: {err}") from err
            raise

    def _properties(self, key: str) -> Any:
        blob = self.client.get_blob_client(self.full_key(key))
        try:
            return self._call("Get Blob Properties", key, blob.get_blob_properties)
        except StorageError as err:
            if faults.is_absent(err):
                return None
            raise

    def size(self, key: str) -> int | None:
        """Return the size of the blob at ``key``, or ``None`` when absent."""
        properties = self._properties(key)
        return None if properties is None else int(properties.size)

    def version(self, key: str) -> ObjectVersion | None:
        """Return the ETag of the blob at ``key``, or ``None`` when absent."""
        properties = self._properties(key)
        return None if properties is None else str(properties.etag)

    def delete(self, key: str) -> None:
        """Remove ``key`` (and its snapshots) if present."""
        blob = self.client.get_blob_client(self.full_key(key))
        try:
            self._call("Delete Blob", key, lambda: blob.delete_blob(delete_snapshots="include"))
        except StorageError as err:
            if not faults.is_absent(err):
                raise

    def delete_many(self, keys: Sequence[str]) -> None:
        """Remove each of ``keys`` present, :data:`DELETES_AT_ONCE` requests at a time.

        Every key is checked first. The first failure stops the requests not
        yet sent and is raised once those under way ended.
        """
        for key in keys:
            self.full_key(key)
        call_each(self.delete, keys, DELETES_AT_ONCE)

    def list(self, prefix: str) -> Iterator[str]:
        """Iterate over the keys that start with ``prefix``, in name order, page by page."""
        edge_key(prefix, self, prefix=True)
        names = self._call(
            "List Blobs",
            prefix,
            lambda: iter(self.client.list_blob_names(name_starts_with=self.prefix + prefix)),
        )
        while True:
            name = self._call("List Blobs", prefix, lambda: next(names, None))
            if name is None:
                return
            yield edge_key(name[len(self.prefix) :], self)

    # -- blocks (see blocks.py) ---------------------------------------------
    def stage_block(self, key: str, block_id: str, body: bytes) -> None:
        """``Put Block``: stage ``body`` as block ``block_id`` of the blob at ``key``."""
        blob = self.client.get_blob_client(self.full_key(key))
        self._call("Put Block", key, lambda: blob.stage_block(block_id, body))

    def commit_blocks(
        self,
        key: str,
        block_ids: Sequence[str],
        token: str,
        *,
        if_absent: bool,
        if_version: ObjectVersion | None,
    ) -> None:
        """``Put Block List``: commit ``block_ids`` at ``key`` with ``token`` in its metadata."""
        conditions = _conditions(if_absent, if_version)
        blob = self.client.get_blob_client(self.full_key(key))
        listed = [BlobBlock(block_id=i) for i in block_ids]
        self._conditional(
            "Put Block List",
            key,
            conditions,
            lambda: blob.commit_block_list(listed, metadata={TOKEN: token}, **conditions),
        )

    def copy_source(self, key: str) -> tuple[str, dict[str, Any]]:
        """The URL the service reads ``key`` from in a copy, and the keywords that authorize it.

        A shared-key account signs a read-only SAS of the blob for
        :data:`COPY_SOURCE_SAS_SECONDS`; a token credential sends its bearer
        token (``x-ms-copy-source-authorization``); a SAS in the account's
        URL is part of the blob's URL already.
        """
        blob = self.client.get_blob_client(self.full_key(key))
        credential = self.client.credential
        account_key = getattr(credential, "account_key", None)
        if account_key is not None:
            expiry = datetime.datetime.now(datetime.UTC)
            expiry += datetime.timedelta(seconds=COPY_SOURCE_SAS_SECONDS)
            sas = generate_blob_sas(
                credential.account_name,
                self.container,
                self.full_key(key),
                account_key=account_key,
                permission=BlobSasPermissions(read=True),
                expiry=expiry,
            )
            return f"{blob.url}?{sas}", {}
        if hasattr(credential, "get_token"):
            token = credential.get_token("https://storage.azure.com/.default").token
            return blob.url, {"source_authorization": f"Bearer {token}"}
        return blob.url, {}

    def stage_block_copy(self, key: str, block_id: str, source: str, start: int, stop: int) -> None:
        """``Put Block From URL``: stage ``[start, stop)`` of ``source`` as a block of ``key``.

        Raises
        ------
        FileNotFoundError
            No blob at ``source``.
        """
        blob = self.client.get_blob_client(self.full_key(key))
        url, authorization = self.copy_source(source)
        try:
            self._call(
                "Put Block From URL",
                key,
                lambda: blob.stage_block_from_url(
                    block_id, url, source_offset=start, source_length=stop - start, **authorization
                ),
            )
        except StorageError as err:
            missing = faults.error_code(err) in ("CannotVerifyCopySource", "BlobNotFound")
            if missing and self.size(source) is None:
                raise FileNotFoundError(f"no Azure blob {self._url(source)} to copy from") from err
            raise

    def discard_uncommitted(self, key: str) -> bool:
        """Delete the blob at ``key`` if it holds uncommitted blocks and no committed content.

        A blob with committed content is left as it is: committing it again
        would discard its uncommitted blocks but change its ETag, and the blob
        may be another writer's (a refused conditional publish). Its blocks
        go with the next block list committed to it, or expire after seven
        days.

        Returns
        -------
        bool
            Whether a blob was deleted.
        """
        blob = self.client.get_blob_client(self.full_key(key))
        try:
            _, uncommitted = self._call("Get Block List", key, lambda: blob.get_block_list("all"))
        except StorageError as err:
            if faults.is_absent(err):
                return False
            raise
        if not uncommitted or self._properties(key) is not None:
            return False
        self.delete(key)
        return True

    # -- parts ---------------------------------------------------------------
    def begin_parts(self, key: str, staging: str, *, any_order: bool = False) -> PartsHandle:
        """Draw the shard's upload and record it under ``staging`` (safe to repeat).

        Blocks lie by their numbers, whatever ``any_order`` says.
        """
        edge_key(staging, self, prefix=True)
        return blocks.begin_parts(self, edge_key(key, self), staging)

    def write_part(
        self, handle: PartsHandle, number: int, buffers: Sequence[Buffer]
    ) -> PartReceipt:
        """Stage part ``number`` as a block (replacing an earlier try)."""
        edge_key(handle.key, self)
        return blocks.write_part(self, handle, number, joined(buffers))

    def copy_part(
        self, handle: PartsHandle, number: int, source: str, start: int, stop: int
    ) -> PartReceipt:
        """Make bytes ``[start, stop)`` of ``source`` part ``number`` (``Put Block From URL``)."""
        edge_key(handle.key, self)
        return blocks.copy_part(self, handle, number, edge_key(source, self), start, stop)

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
        """Stage head and tail, then commit the block list (with the conditions)."""
        edge_key(handle.key, self)
        _conditions(if_absent, if_version)
        blocks.finish_parts(
            self, handle, receipts, head, tail, if_absent=if_absent, if_version=if_version
        )

    def abort_parts(self, handle: PartsHandle) -> None:
        """Discard the shard's uncommitted blocks where possible; remove its marker."""
        edge_key(handle.key, self)
        blocks.abort_parts(self, handle)

    def cleanup(self, staging: str, shard_prefix: str) -> int:
        """Discard the blocks of every shard recorded under ``staging``; remove the records.

        Returns
        -------
        int
            How many leftovers were removed: blobs whose blocks were discarded, plus markers.
        """
        edge_key(staging, self, prefix=True)
        edge_key(shard_prefix, self, prefix=True)
        return blocks.cleanup(self, [m for m in self.list(f"{staging}/")])
