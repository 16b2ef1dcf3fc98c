"""Shards written in parts on GCS: part objects under the staging prefix, joined by ``compose``.

GCS has no multipart upload that many clients feed; it has ``compose``,
which joins up to 32 existing objects of a bucket into one, server side,
and publishes the result in one step (readers see the old object or the
new one). A shard written in parts by several tasks is therefore:

* ``begin_parts``: nothing is sent. The parts of ``key`` go under
  ``<staging>/<sha1 of key>/`` (the handle's ``upload``), a name that
  depends only on the write and the key, so that a task Dask runs again
  finds the parts other tasks already wrote.
* ``write_part``: one upload of ``<upload>/part-<number>``; the receipt
  keeps the part object's generation, so that the compose takes exactly
  the bytes of this try even if a late earlier try lands afterwards.
* ``finish_parts``: head and tail are uploaded as small objects beside the
  parts; then the sources are composed 32 at a time into intermediate
  objects, level by level, until at most 32 remain, which one last
  ``compose`` publishes at the key with the write's precondition
  (``ifGenerationMatch=0`` to create, ``=<generation>`` to replace) and a
  token of its own in the object's metadata. Then every object under
  ``<upload>/`` is deleted.
* ``abort_parts`` and ``cleanup`` delete what is under the upload and the
  staging prefix: part objects are plain objects, so a listing finds all
  that a killed write left.

A final ``compose`` whose answer was lost may have published the shard:
when finishing fails (a transient fault, a 412 found by a retry of a try
that landed, parts already deleted by the try that landed), the object at
the key is looked at, and if it carries this finish's token
(:func:`finish_token`: the same for every try of one finish) the publish
succeeded. Deleting the parts after the publish is best effort: what is
left goes with the write's staging area.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Sequence
from typing import Protocol

from shardpipe.errors import ConditionFailedError, StorageError
from shardpipe.storage.gcs.objects import GcsObjects
from shardpipe.storage.parts import PartReceipt, PartsHandle

MAX_SOURCES = 32
"""Most source objects of one ``compose`` request."""

PUT_TOKEN = "shardpipe-put"
"""Metadata key of the token a conditional publish carries (see the store's ``put``)."""


class Conditional(Protocol):
    """What the parts functions need of the store: its objects and its conditional checks."""

    objects: GcsObjects

    def check_condition(self, key: str, params: dict[str, str], operation: str) -> None:
        """Raise ``ConditionFailedError`` unless the precondition in ``params`` holds now."""
        ...

    def condition_failed(
        self, operation: str, key: str, params: dict[str, str]
    ) -> ConditionFailedError:
        """The error for a refused conditional ``operation`` of ``key``."""
        ...

    def holds_token(self, key: str, token: str, err: StorageError) -> bool:
        """Whether the object at ``key`` carries ``token`` (a lost answer's publish landed)."""
        ...


def upload_prefix(staging: str, key: str) -> str:
    """The key prefix of the part objects of ``key`` in the write staged at ``staging``."""
    return f"{staging}/{hashlib.sha1(key.encode()).hexdigest()}"


def begin_parts(key: str, staging: str) -> PartsHandle:
    """The handle of ``key`` written in parts under ``staging`` (no request is made)."""
    return PartsHandle(key, upload_prefix(staging, key), staging)


def _part_key(handle: PartsHandle, number: int) -> str:
    return f"{handle.upload}/part-{number:06d}"


def write_part(objects: GcsObjects, handle: PartsHandle, number: int, body: bytes) -> PartReceipt:
    """Upload part ``number`` as its own object (replacing an earlier try).

    Parameters
    ----------
    objects : GcsObjects
        The store's objects.
    handle : PartsHandle
        From :func:`begin_parts`.
    number : int
        The part's number, from 0.
    body : bytes
        Its bytes.

    Returns
    -------
    PartReceipt
        Number, size and the part object's generation (as ``etag``).
    """
    if number < 0:
        raise ValueError(f"part number {number} of {handle.key!r} is negative")
    answer = objects.upload(_part_key(handle, number), body)
    return PartReceipt(number, len(body), str(answer.json()["generation"]))


def _ordered(handle: PartsHandle, receipts: Sequence[PartReceipt]) -> list[PartReceipt]:
    by_number: dict[int, PartReceipt] = {}
    for receipt in receipts:
        if receipt.etag is None or by_number.setdefault(receipt.number, receipt) != receipt:
            raise ValueError(f"receipt {receipt!r} of {handle.key!r}: no generation or a conflict")
    return [by_number[n] for n in sorted(by_number)]


def _small_object(objects: GcsObjects, key: str, body: bytes) -> tuple[str, str | None]:
    """Upload ``body`` (a head or a tail) at ``key``; return it as a compose source."""
    return key, str(objects.upload(key, body).json()["generation"])


def _compose_levels(
    objects: GcsObjects, handle: PartsHandle, sources: list[tuple[str, str | None]]
) -> list[tuple[str, str | None]]:
    """Compose ``sources`` 32 at a time, level by level, until at most 32 remain."""
    level = 0
    while len(sources) > MAX_SOURCES:
        joined: list[tuple[str, str | None]] = []
        for group, start in enumerate(range(0, len(sources), MAX_SOURCES)):
            key = f"{handle.upload}/level-{level}-{group:06d}"
            answer = objects.compose(key, sources[start : start + MAX_SOURCES])
            joined.append((key, str(answer.json()["generation"])))
        sources, level = joined, level + 1
    return sources


def finish_parts(
    store: Conditional,
    handle: PartsHandle,
    receipts: Sequence[PartReceipt],
    head: bytes,
    tail: bytes,
    params: dict[str, str],
) -> None:
    """Publish ``head + parts + tail`` at the handle's key with ``compose``.

    Parameters
    ----------
    store : Conditional
        The store writing the shard.
    handle : PartsHandle
        From :func:`begin_parts`.
    receipts : sequence of PartReceipt
        The tasks' parts.
    head, tail : bytes
        Bytes before and after the parts (either may be empty).
    params : dict of str to str
        ``{"ifGenerationMatch": "0"}``, ``{"ifGenerationMatch": <generation>}``
        or ``{}``: the precondition of the publish.

    Notes
    -----
    With no receipts and an empty head and tail nothing is published and the
    parts are deleted. After a failure (a failed condition included) the
    part objects stay for :func:`abort_parts` or the write's cleanup.
    """
    objects = store.objects
    ordered = _ordered(handle, receipts)
    if not ordered and not head and not tail:
        abort_parts(objects, handle)
        return
    token = finish_token(handle, ordered, head, tail)
    try:
        _publish(store, handle, ordered, head, tail, params, token)
    except StorageError as err:
        # a publish whose answer was lost (this try's, or an earlier try's of this
        # very finish, retried above) carries this token
        if not store.holds_token(handle.key, token, err):
            raise
    with contextlib.suppress(StorageError):  # else the write's discard_staging or cleanup does
        abort_parts(objects, handle)


def finish_token(
    handle: PartsHandle, ordered: Sequence[PartReceipt], head: bytes, tail: bytes
) -> str:
    """The token of one publish: the same for every try of it, different for any other.

    Made of the handle, the parts' numbers and generations, and digests of the head
    and the tail, so that a ``finish_parts`` tried again after its ``compose`` landed
    recognises the object as its own.
    """
    digest = hashlib.sha256(handle.upload.encode())
    for receipt in ordered:
        digest.update(f"\n{receipt.number}:{receipt.etag}".encode())
    digest.update(hashlib.sha256(head).digest() + hashlib.sha256(tail).digest())
    return digest.hexdigest()[:32]


def _publish(
    store: Conditional,
    handle: PartsHandle,
    ordered: Sequence[PartReceipt],
    head: bytes,
    tail: bytes,
    params: dict[str, str],
    token: str,
) -> None:
    """Upload head and tail, compose in levels, then the last ``compose`` at the key."""
    objects = store.objects
    sources: list[tuple[str, str | None]] = [(_part_key(handle, r.number), r.etag) for r in ordered]
    if head:
        sources.insert(0, _small_object(objects, f"{handle.upload}/head", head))
    if tail:
        sources.append(_small_object(objects, f"{handle.upload}/tail", tail))
    sources = _compose_levels(objects, handle, sources)
    # emulators that ignore compose preconditions (fake-gcs-server) still get this
    # check; GCS enforces ifGenerationMatch itself, closing the window after it
    store.check_condition(handle.key, params, "compose")
    answer = objects.compose(handle.key, sources, params=params, metadata={PUT_TOKEN: token})
    if answer.status == 412:
        raise store.condition_failed("compose", handle.key, params)


def abort_parts(objects: GcsObjects, handle: PartsHandle) -> None:
    """Delete every object under the handle's upload prefix (parts, head, tail, levels)."""
    objects.delete_many(list(objects.names(f"{handle.upload}/")))


def cleanup(objects: GcsObjects, staging: str) -> int:
    """Delete every object under ``staging``: what writes in parts left; return how many."""
    leftovers = list(objects.names(f"{staging}/"))
    objects.delete_many(leftovers)
    return len(leftovers)
