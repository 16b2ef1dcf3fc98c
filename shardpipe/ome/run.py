"""Running an OME-Zarr write: the group's record, its metadata, every level in one computation.

Order of a run (nothing of it before the whole plan is checked):

1. with ``overwrite``, the old group is removed (every key under it), or
   the old label images that new ones replace;
2. the group's job record (:data:`~shardpipe.storage.keys.OME_GROUP_RECORD`) is saved, saying
   that a write is under way and what it writes (not into an Icechunk
   session, where an unfinished write never reaches a commit);
3. the ``zarr.json`` of the image group, the ``labels`` group and each label
   group are written, with their OME attributes;
4. every level of every pyramid is written in one pass of the runner
   (:mod:`shardpipe.write.job`): one computation, in which
   each source block is read once and feeds the level-0 shards and the
   downsampling to the next level; each level array is created (and
   holds its job marker and job record) as a write of its own does;
5. the group's record is removed (or, into Icechunk, the session committed
   with ``commit``).

A run that stops part way (an error, ``kill -9``) leaves the record:
:func:`shardpipe.verify` on the group reports the unfinished write,
and the same call with ``resume=True`` writes the shards that are missing
(each level resumes as a write does: :mod:`shardpipe.write.resume`).
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from collections.abc import Sequence
from typing import Any

import zarr

from shardpipe import advice
from shardpipe.engine.reports import WriteReport
from shardpipe.errors import MetadataError
from shardpipe.ome.metadata import labels_attributes
from shardpipe.ome.multiscale import MultiscaleWrite
from shardpipe.storage.keys import JOB_DIR, OME_GROUP_RECORD
from shardpipe.storage.resolve import ResolvedStore
from shardpipe.stored.places import discard_metadata_temporaries
from shardpipe.write.job import Pass, ShardedWrite

__all__ = [
    "GROUP_RECORD",
    "level_paths",
    "pyramid_pass",
    "read_group_record",
    "remove_group",
    "write_group",
]

GROUP_RECORD = OME_GROUP_RECORD
"""Key (inside the image group) of the record of a write under way."""


def read_group_record(target: ResolvedStore) -> dict[str, Any] | None:
    """The group's job record, or None when no write is under way.

    Raises
    ------
    shardpipe.errors.MetadataError
        When the record is not a JSON object.
    """
    data = target.shards.get(target.key(GROUP_RECORD))
    if data is None:
        return None
    try:
        record = json.loads(data)
    except ValueError as err:
        raise MetadataError(f"{target.key(GROUP_RECORD)} is not JSON ({err})") from err
    if not isinstance(record, dict):
        raise MetadataError(f"{target.key(GROUP_RECORD)} is not a JSON object")
    return record


def save_group_record(target: ResolvedStore, identity: dict[str, Any], doing: str) -> None:
    """Record that a write (``doing``) of the group is under way, and what it writes."""
    document = {
        "doing": doing,
        "job": uuid.uuid4().hex,
        "started": time.time(),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "identity": identity,
    }
    target.shards.put(target.key(GROUP_RECORD), [json.dumps(document).encode()])


def delete_group_record(target: ResolvedStore) -> None:
    """Remove the group's record (and its folder, when empty): no write is under way any more.

    An empty job folder (:data:`~shardpipe.storage.keys.JOB_DIR`) left in the group
    would make zarr warn, on every walk of the hierarchy, of an object it does not
    recognise.
    """
    target.shards.delete(target.key(GROUP_RECORD))
    target.shards.prune(target.key(f"{JOB_DIR}/"))


def remove_group(target: ResolvedStore, path: str = "") -> None:
    """Delete every key under the group at ``path`` (its arrays, labels and records)."""
    store = target.shards
    prefix = target.key(f"{path}/" if path else "")
    store.delete_many(list(store.list(prefix)))


def write_group(target: ResolvedStore, path: str, attributes: dict[str, Any]) -> None:
    """Write (or replace the attributes of) the group at ``path`` inside the image group.

    zarr's temporary file of the group's ``zarr.json``, left by a write
    killed while zarr wrote it, is removed first
    (:func:`~shardpipe.stored.places.discard_metadata_temporaries`).
    """
    discard_metadata_temporaries(target, path)
    where = target.key(path) if path else target.path
    group = zarr.open_group(
        target.zarr_store_for_writes, path=where or None, mode="a", zarr_format=3
    )
    group.attrs.put(attributes)


def write_groups(
    target: ResolvedStore, multiscales: Sequence[MultiscaleWrite], label_names: Sequence[str]
) -> None:
    """The ``zarr.json`` of every group the write makes: image, ``labels``, label images."""
    for m in multiscales:
        if m.path == "":
            write_group(target, "", m.attributes)
    if label_names:
        write_group(target, "labels", labels_attributes(label_names))
    for m in multiscales:
        if m.path:
            write_group(target, m.path, m.attributes)


def pyramid_pass(
    target: ResolvedStore,
    multiscales: Sequence[MultiscaleWrite],
    label_names: Sequence[str],
    *,
    remove: Sequence[str],
    identity: dict[str, Any],
) -> Pass:
    """The one pass of an OME-Zarr write: the groups, then every level of every pyramid.

    It begins by removing the groups in ``remove`` (``""``: the whole image
    group), saving the group's record (with ``identity``, which
    ``resume=True`` compares) and writing the groups; its writes are every
    level of every pyramid; it ends by removing the record.

    Parameters
    ----------
    target : ResolvedStore
        The image group.
    multiscales : sequence of MultiscaleWrite
        The image's pyramid and the label images', planned.
    label_names : sequence of str
        Every name the ``labels`` group lists after the write.
    remove : sequence of str
        Groups to remove first.
    identity : dict
        What the group's record holds.
    """
    transactional = target.transactional

    def begin(_: bool) -> list[ShardedWrite]:
        for path in remove:
            remove_group(target, path)
        if not transactional:
            save_group_record(target, identity, "write")
        write_groups(target, multiscales, label_names)
        return [job for m in multiscales for job in m.jobs]

    def end(_: Sequence[WriteReport]) -> None:
        if not transactional:
            delete_group_record(target)

    def abandon(err: BaseException) -> None:
        if not transactional:
            err.add_note(
                "shardpipe: the OME-Zarr group is left unfinished (verify reports it); run the "
                f"same write with {advice.setting('resume')} to write the shards that are missing"
            )

    return Pass("write the pyramids", begin, end, abandon)


def level_paths(multiscales: Sequence[MultiscaleWrite]) -> list[str]:
    """The path of every level array of ``multiscales`` in the image group, in write order."""
    return [
        "/".join(p for p in (m.path, str(level.index)) if p)
        for m in multiscales
        for level in m.levels
    ]
