"""The marker of a migration under way: what it may be trusted for.

It is :data:`~shardpipe.storage.keys.MIGRATION_MARKER` at the target.

:func:`shardpipe.migrate` writes the marker at its target before it copies
anything: it names the source, whether the migration is in place, and the
``zarr.json`` documents and arrays the run writes (and those of an
interrupted run before it). A rerun reads it to clear what the interrupted
run left, and deletes keys it lists, so the marker is stored bytes like
any other: anyone could have written it.

It is trusted only when it is well formed, every key it lists stays inside
the hierarchy (:func:`~shardpipe.core.keys.checked_key`) and is a
``zarr.json`` key, and it names *this* run: the same source, and the same
in-place flag. Anything else is refused by name before anything is written
or deleted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from shardpipe.core.keys import checked_key
from shardpipe.errors import InvalidArgumentError, MetadataError
from shardpipe.journal.unfinished import UnfinishedJob, same_call
from shardpipe.legacy.hierarchy import read_json
from shardpipe.storage.keys import (
    JOB_DIR,
    MIGRATION_MARKER,
    MIGRATION_STAGING,
    MIGRATION_TEMPORARY,
    TEMPORARY_SUFFIX,
)
from shardpipe.storage.resolve import ResolvedStore

_FIX = f"delete {MIGRATION_MARKER} only if no migration is under way there"


@dataclass(frozen=True)
class MigrationMarker:
    """What a marker says.

    Attributes
    ----------
    source : str
        The migrated source, as :func:`shardpipe.migrate` names it (a URL as
        given, a local path made absolute).
    in_place : bool
        Whether the source itself becomes the v3 hierarchy.
    documents : tuple of str
        Keys of the ``zarr.json`` documents the runs write.
    arrays : tuple of str
        Paths of the arrays whose shards the runs write (``""``: the root).
    """

    source: str
    in_place: bool
    documents: tuple[str, ...] = ()
    arrays: tuple[str, ...] = ()

    def to_json(self) -> bytes:
        """The marker's bytes."""
        document = {
            "source": self.source,
            "in_place": self.in_place,
            "documents": sorted(self.documents),
            "arrays": sorted(self.arrays),
        }
        return json.dumps(document, indent=2).encode()


def read_marker(target: ResolvedStore) -> MigrationMarker | None:
    """The marker at ``target`` (None when there is none), checked to be well formed.

    Raises
    ------
    shardpipe.errors.MetadataError
        When a member is missing or of the wrong type.
    shardpipe.errors.UnsafeKeyError
        When a key it lists could lead outside the hierarchy.
    """
    key = target.key(MIGRATION_MARKER)
    found = read_json(target.shards, key)
    if found is None:
        return None
    source, in_place = found.get("source"), found.get("in_place")
    if not isinstance(source, str) or not isinstance(in_place, bool):
        raise MetadataError(
            f"{key!r}: 'source' must be a string and 'in_place' true or false, got "
            f"{source!r} and {in_place!r}; {_FIX}"
        )
    return MigrationMarker(
        source,
        in_place,
        tuple(_documents(key, found.get("documents", []))),
        tuple(_arrays(key, found.get("arrays", []))),
    )


def _strings(key: str, member: str, values: Any) -> list[str]:
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise MetadataError(
            f"{key!r}: {member!r} must be a list of strings, got {values!r}; {_FIX}"
        )
    return values


def _documents(key: str, values: Any) -> list[str]:
    documents = _strings(key, "documents", values)
    for document in documents:
        checked_key(document, f"the migration marker {key!r}")
        if document.rpartition("/")[2] != "zarr.json":
            raise MetadataError(
                f"{key!r}: {document!r} among its documents is no zarr.json key; {_FIX}"
            )
    return documents


def _arrays(key: str, values: Any) -> list[str]:
    arrays = _strings(key, "arrays", values)
    for path in arrays:
        if path:  # "" is the root array
            checked_key(path, f"the migration marker {key!r}")
    return arrays


def trusted_marker(
    target: ResolvedStore, parameter: str, given: Any, source: str, in_place: bool
) -> MigrationMarker | None:
    """The marker at ``target`` if it is one of this migration's; None if there is none.

    Parameters
    ----------
    target : ResolvedStore
        Where the marker would be (the source, in place).
    parameter, given : str, object
        The argument naming ``target`` (``"source"`` in place, else
        ``"target"``) and its value, for the error.
    source : str
        This run's source, named as a marker names it.
    in_place : bool
        Whether this run migrates in place.

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        When the marker is another migration's (another source, or the
        other in-place flag): nothing was written or deleted.
    shardpipe.errors.MetadataError, shardpipe.errors.UnsafeKeyError
        When it is malformed (:func:`read_marker`).
    """
    marker = read_marker(target)
    if marker is None or (marker.source == source and marker.in_place == in_place):
        return marker
    raise InvalidArgumentError(
        parameter,
        f"{given!r} holds an interrupted migration of {marker.source!r} "
        f"{_where(marker.in_place)} (its marker is {MIGRATION_MARKER}), not of {source!r} "
        f"{_where(in_place)} as this run would be",
        f"Run migrate again as that run was called to finish it, or pass another "
        f"{parameter}; {_FIX}",
    )


def _where(in_place: bool) -> str:
    return "in place" if in_place else "to a target, not in place"


def write_marker(target: ResolvedStore, marker: MigrationMarker) -> None:
    """Write ``marker`` at ``target`` (replacing the one there)."""
    target.shards.put(target.key(MIGRATION_MARKER), [marker.to_json()])


def drop_marker(target: ResolvedStore, *, dry_run: bool = False) -> int:
    """Delete the marker, the temporary files a kill may have left beside it, its folder if empty.

    The marker goes last (after the staging area and the temporary files):
    a kill before leaves it for a rerun to find. Returns how many keys were
    (with ``dry_run``: would be) deleted.
    """
    shards = target.shards
    temporaries = shards.list(target.key(MIGRATION_TEMPORARY))
    leftovers = [k for k in temporaries if k.endswith(TEMPORARY_SUFFIX)]
    if shards.size(target.key(MIGRATION_MARKER)) is not None:
        leftovers.append(target.key(MIGRATION_MARKER))
    if dry_run:
        return len(leftovers)
    shards.discard_staging(target.key(MIGRATION_STAGING))
    for key in leftovers:
        shards.delete(key)
    shards.prune(target.key(f"{JOB_DIR}/"))
    return len(leftovers)


def migration_job(target: ResolvedStore) -> UnfinishedJob | None:
    """The migration under way at ``target`` that its marker shows, or None.

    A marker that cannot be trusted names no migration to carry on (a rerun
    refuses it by name).
    """
    try:
        marker = read_marker(target)
    except (MetadataError, InvalidArgumentError):
        return None
    if marker is None:
        return None
    how = "in place" if marker.in_place else "into this target"
    return UnfinishedJob(
        "migration",
        target.key(MIGRATION_MARKER),
        f"{marker.source!r} ({how})",
        None,
        f"run {same_call('migrate', 'migrate')} again, as that run was called",
    )
