"""Shards written in parts on S3: one multipart upload each, and finding every upload.

The functions here are the parts half of
:class:`~shardpipe.storage.s3.store.S3ShardStore` (its ``begin_parts``,
``write_part``, ``copy_part``, ``finish_parts``, ``abort_parts`` and
``cleanup`` call them with the store), on top of the store's requests.

* Part number 1 is reserved for the head, the tasks' parts ``0, 1, ...``
  become part numbers ``2, 3, ...`` and the tail (the index when it goes at
  the end) takes the last part number, 10,000. ``CompleteMultipartUpload``
  publishes the shard atomically; until then nothing is visible at the key.
  Re-uploading a part number replaces the earlier upload, so retried tasks
  are idempotent and a shard never mixes two attempts of a part.
* S3 refuses parts under 5 MiB except the last one (``min_part_size``): the
  callers pad parts and the head (the shard format decides how).
* ``copy_part`` is ``UploadPartCopy`` of a byte range, also of the object
  being replaced: an object can be composed from its old bytes server side.
* ``If-None-Match: *`` and ``If-Match`` are sent with
  ``CompleteMultipartUpload``. Some S3-compatible servers (moto among them)
  ignore ``If-Match`` there: the ETag is also checked just before
  completing. After a failed conditional completion the upload is left for
  ``abort_parts`` or ``cleanup`` (after a 409 AWS wants a new upload).

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

A ``CompleteMultipartUpload`` whose response was lost may have published
the shard: when completing fails (a transient fault, ``NoSuchUpload``, a
failed condition), ``finish_parts`` compares the object now at the key
with what the completion would have made: same size, and the multipart
ETag, the MD5 of the parts' binary MD5s followed by ``-<number of parts>``,
computed from the part ETags it sent. If they match the publish succeeded.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Any

from shardpipe.core.keys import checked_key
from shardpipe.errors import StorageError
from shardpipe.storage.keys import edge_key
from shardpipe.storage.parts import PartReceipt, PartsHandle
from shardpipe.storage.s3.faults import error_code
from shardpipe.storage.s3.requests import S3Requests

HEAD_PART = 1
FIRST_PART = 2
TAIL_PART = 10_000
MAX_TASK_PARTS = TAIL_PART - 2
"""Parts a shard may have besides the head and the tail."""
_MARKER_SUFFIX = ".upload"
_ETAG = re.compile(r'^"?([0-9a-fA-F]{32})"?$')


def _md5_etag(body: bytes) -> str:
    """The ETag S3 gives an object of ``body`` written in one piece (without SSE-KMS/C)."""
    return f'"{hashlib.md5(body, usedforsecurity=False).hexdigest()}"'


def multipart_etag(part_etags: Sequence[str]) -> str | None:
    """The ETag S3 gives the object completed from parts with ``part_etags``, in order.

    Parameters
    ----------
    part_etags : sequence of str
        The parts' ETags, in part-number order.

    Returns
    -------
    str or None
        ``"<md5 of the parts' binary MD5s>-<number of parts>"`` in quotes;
        None when a part's ETag is no MD5 (encrypted with SSE-KMS or SSE-C,
        say).
    """
    digests = []
    for etag in part_etags:
        match = _ETAG.match(etag)
        if match is None:
            return None
        digests.append(bytes.fromhex(match.group(1)))
    return f'"{hashlib.md5(b"".join(digests), usedforsecurity=False).hexdigest()}-{len(digests)}"'


def _marker(staging: str, key: str) -> str:
    """Key of the object recording the upload of ``key`` (its id, then the key)."""
    return f"{staging}/{hashlib.sha1(key.encode()).hexdigest()}{_MARKER_SUFFIX}"


def _abort(store: S3Requests, key: str, upload_id: str) -> bool:
    """Abort upload ``upload_id`` of ``key``; False when it was already gone."""
    try:
        store.call("abort_multipart_upload", key, Key=store.full_key(key), UploadId=upload_id)
    except StorageError as err:
        if error_code(err) in ("NoSuchUpload", "404"):
            return False
        raise
    return True


def _abort_others(store: S3Requests, key: str, keep: str | None) -> int:
    """Abort every open upload of exactly ``key`` but ``keep``; return how many."""
    return sum(
        _abort(store, key, upload)
        for found, upload in store.open_uploads(key)
        if found == key and upload != keep
    )


def begin_parts(store: S3Requests, key: str, staging: str) -> PartsHandle:
    """Create the multipart upload of ``key``, recorded under ``staging`` before it exists.

    Parameters
    ----------
    store : S3Requests
        The store writing the shard.
    key : str
        The shard's key.
    staging : str
        The write's staging prefix, where the marker goes.

    Returns
    -------
    PartsHandle
        The upload. Other open uploads of ``key`` (a create whose response
        was lost and was retried) are aborted. If this write (``staging``)
        already has an open upload of ``key`` (Dask ran this task again
        because the worker holding its result died, while parts of that
        upload were already written by other tasks), that upload is kept and
        returned, so the parts written into it stay valid.
    """
    marker = _marker(staging, key)
    recorded, _, _ = (store.get(marker) or b"").decode().partition("\n")
    if recorded and any(found == key and up == recorded for found, up in store.open_uploads(key)):
        _abort_others(store, key, keep=recorded)
        return PartsHandle(key, recorded, staging)
    store.put(marker, [f"\n{key}".encode()])  # the key is known before any upload exists
    upload_id = str(store.call("create_multipart_upload", key, Key=store.full_key(key))["UploadId"])
    store.put(marker, [f"{upload_id}\n{key}".encode()])
    _abort_others(store, key, keep=upload_id)
    return PartsHandle(key, upload_id, staging)


def _upload(store: S3Requests, handle: PartsHandle, part_number: int, body: bytes) -> str:
    kwargs = {"Key": store.full_key(handle.key), "UploadId": handle.upload, "Body": body}
    return str(store.call("upload_part", handle.key, PartNumber=part_number, **kwargs)["ETag"])


def _check_number(handle: PartsHandle, number: int) -> None:
    if not 0 <= number < MAX_TASK_PARTS:
        raise ValueError(f"part number {number} of {handle.key!r} not in [0, {MAX_TASK_PARTS})")


def write_part(store: S3Requests, handle: PartsHandle, number: int, body: bytes) -> PartReceipt:
    """Upload part ``number`` as S3 part number ``number + 2`` (replacing an earlier try).

    Parameters
    ----------
    store : S3Requests
        The store writing the shard.
    handle : PartsHandle
        The upload, from :func:`begin_parts`.
    number : int
        The task's part number, from 0.
    body : bytes
        The part's bytes.

    Returns
    -------
    PartReceipt
        The part's number, size and ETag.
    """
    _check_number(handle, number)
    etag = _upload(store, handle, number + FIRST_PART, body)
    return PartReceipt(number, len(body), etag)


def copy_part(
    store: S3Requests, handle: PartsHandle, number: int, source: str, start: int, stop: int
) -> PartReceipt:
    """Make bytes ``[start, stop)`` of ``source`` part ``number`` with ``UploadPartCopy``.

    Parameters
    ----------
    store : S3Requests
        The store writing the shard.
    handle : PartsHandle
        The upload, from :func:`begin_parts`.
    number : int
        The task's part number, from 0.
    source : str
        The key copied from (the object being replaced included).
    start, stop : int
        The byte range of ``source``.

    Returns
    -------
    PartReceipt
        The part's number, size and ETag.

    Raises
    ------
    FileNotFoundError
        No object at ``source`` (or, on moto, no such upload).
    """
    _check_number(handle, number)
    if not 0 <= start < stop:
        raise ValueError(f"invalid byte range [{start}, {stop}) of {source!r}")
    try:
        result = store.call(
            "upload_part_copy",
            handle.key,
            Key=store.full_key(handle.key),
            UploadId=handle.upload,
            PartNumber=number + FIRST_PART,
            CopySource={"Bucket": store.bucket, "Key": store.full_key(source)},
            CopySourceRange=f"bytes={start}-{stop - 1}",
        )
    except StorageError as err:
        # AWS says NoSuchKey; moto answers a bare 404 (which could also mean
        # that the upload is gone)
        code = error_code(err)
        if code in ("NoSuchKey", "404"):
            maybe = "" if code == "NoSuchKey" else f" (or no upload {handle.upload})"
            raise FileNotFoundError(
                f"no S3 object s3://{store.bucket}/{store.full_key(source)} to copy from{maybe}"
            ) from err
        raise
    return PartReceipt(number, stop - start, str(result["CopyPartResult"]["ETag"]))


def finish_parts(
    store: S3Requests,
    handle: PartsHandle,
    receipts: Sequence[PartReceipt],
    head: bytes,
    tail: bytes,
    conditions: dict[str, str],
) -> None:
    """Upload head (part 1) and tail (part 10,000), then complete the upload.

    Parameters
    ----------
    store : S3Requests
        The store writing the shard.
    handle : PartsHandle
        The upload, from :func:`begin_parts`.
    receipts : sequence of PartReceipt
        The tasks' parts.
    head, tail : bytes
        The bytes before and after the parts (either may be empty).
    conditions : dict of str to str
        ``{"IfNoneMatch": "*"}``, ``{"IfMatch": <version>}`` or ``{}``, sent
        with the completion (``IfMatch`` is also checked just before it).

    Notes
    -----
    Every part but the last, the head and the tail included, must have
    ``min_part_size`` bytes. With no receipts and an empty head and tail the
    upload is aborted. When completing fails but the object now at the key
    is the one this completion makes (its response was lost, and a retry
    found the upload gone or the condition no longer true), the publish
    succeeded. Otherwise (a failed condition included) the upload stays open
    for ``abort_parts`` or ``cleanup``.
    """
    if_version = conditions.get("IfMatch")
    by_number: dict[int, PartReceipt] = {}
    for receipt in receipts:
        if receipt.etag is None or by_number.setdefault(receipt.number, receipt) != receipt:
            raise ValueError(f"receipt {receipt!r} of {handle.key!r}: no ETag or a conflict")
    ordered = [by_number[n] for n in sorted(by_number)]
    sizes = [len(head)] * bool(head) + [r.size for r in ordered] + [len(tail)] * bool(tail)
    if not sizes:
        abort_parts(store, handle)
        return
    small = [i for i, size in enumerate(sizes[:-1]) if size < store.min_part_size]
    if small:
        raise ValueError(
            f"S3 needs {store.min_part_size} bytes in every part but the last of "
            f"{handle.key!r}; part {small[0]} of {len(sizes)} (head and tail included) "
            f"has {sizes[small[0]]}"
        )
    parts: list[dict[str, Any]] = [
        {"PartNumber": r.number + FIRST_PART, "ETag": r.etag} for r in ordered
    ]
    # the ETag of every part by S3 part number: head and tail get their MD5s
    # until the server's answers replace them (they are the same without SSE-KMS/C)
    etags = {part["PartNumber"]: str(part["ETag"]) for part in parts}
    for number, body in [(HEAD_PART, head), (TAIL_PART, tail)]:
        if body:
            etags[number] = _md5_etag(body)
    try:
        for number, body in [(HEAD_PART, head), (TAIL_PART, tail)]:
            if body:
                etags[number] = _upload(store, handle, number, body)
                parts.append({"PartNumber": number, "ETag": etags[number]})
        parts.sort(key=lambda part: part["PartNumber"])
        kwargs = {"Key": store.full_key(handle.key), "UploadId": handle.upload, **conditions}
        # servers that ignore If-Match on completion (moto) still get this check;
        # AWS enforces the header itself, closing the window after it
        if if_version is not None and store.version(handle.key) != if_version:
            raise store.condition_failed("complete_multipart_upload", handle.key, conditions)
        store.call(
            "complete_multipart_upload", handle.key, MultipartUpload={"Parts": parts}, **kwargs
        )
    except StorageError as err:
        expected = multipart_etag([etags[n] for n in sorted(etags)])
        if not _completed(store, handle.key, expected, sum(sizes), err):
            raise
    store.fs.invalidate_cache(f"{store.bucket}/{store.full_key(handle.key)}")
    _abort_others(store, handle.key, keep=None)
    store.delete(_marker(handle.staging, handle.key))


def _completed(
    store: S3Requests, key: str, expected: str | None, size: int, err: StorageError
) -> bool:
    """Whether the object at ``key`` is the one a completion that seemed to fail made."""
    if expected is None:
        return False
    try:
        head = store.head_object(key)
    except StorageError as again:
        err.add_note(f"whether the upload was completed all the same is unknown: {again}")
        return False
    return (
        head is not None
        and str(head.get("ETag")) == expected
        and int(head.get("ContentLength", -1)) == size
    )


def abort_parts(store: S3Requests, handle: PartsHandle) -> None:
    """Abort the multipart upload of ``handle`` and any other open upload of its key.

    Parameters
    ----------
    store : S3Requests
        The store writing the shard.
    handle : PartsHandle
        The upload; nothing to do for one already gone.
    """
    _abort(store, handle.key, handle.upload)
    _abort_others(store, handle.key, keep=None)
    store.delete(_marker(handle.staging, handle.key))


def cleanup(store: S3Requests, staging: str, shard_prefix: str) -> int:
    """Abort the multipart uploads the writes with staging prefix ``staging`` left open.

    Every key :func:`begin_parts` started an upload of is named by a marker
    under ``staging`` (written before the upload existed). This lists the
    open uploads under ``shard_prefix`` (and those of any marked key outside
    it) and aborts every upload of a marked key, the ones whose ids were
    never heard of included; uploads of other keys are left alone. Then the
    markers are removed.

    Parameters
    ----------
    store : S3Requests
        The store the writes went to.
    staging : str
        The writes' staging prefix.
    shard_prefix : str
        Where the shards' keys are.

    Returns
    -------
    int
        How many leftovers were removed: uploads aborted plus markers.
    """
    edge_key(staging, store, prefix=True)
    edge_key(shard_prefix, store, prefix=True)
    marked: dict[str, set[str]] = {}  # shard key -> upload ids recorded
    markers = list(store.list(f"{staging}/"))
    for marker in markers:
        upload_id, _, key = (store.get(marker) or b"").decode(errors="replace").partition("\n")
        if key:
            checked_key(key, f"the upload record {marker!r}")
            marked.setdefault(key, set()).update([upload_id] if upload_id else [])
    removed = 0
    if marked:
        outside = [key for key in marked if not key.startswith(shard_prefix)]
        found = store.open_uploads(shard_prefix) + [
            upload for key in outside for upload in store.open_uploads(key)
        ]
        aborted: set[str] = set()
        for key, upload_id in found:
            if key in marked and upload_id not in aborted:
                removed += _abort(store, key, upload_id)
                aborted.add(upload_id)
        for key, ids in marked.items():
            for upload_id in ids - aborted:  # not listed (yet): abort by id
                removed += _abort(store, key, upload_id)
    for marker in markers:
        store.delete(marker)
        removed += 1
    return removed
