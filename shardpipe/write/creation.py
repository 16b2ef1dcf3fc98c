"""Creating the array a write fills, and the checks made just before.

A planned write looks at its target once more when it starts (another job
may have taken the array, or a node appeared since planning), saves its job
record (:mod:`shardpipe.write.resume`) and writes the metadata, before any
shard. These functions run in the client (``ShardedWrite.execute``) or as
the first and last tasks of a delayed write (``ShardedWrite.to_delayed``).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import zarr

from shardpipe import advice
from shardpipe.engine.reports import WriteReport
from shardpipe.engine.tasks import WriteTarget
from shardpipe.errors import InvalidArgumentError, MetadataError
from shardpipe.internals.zarr_core import ArrayV3Metadata
from shardpipe.journal.job_record import delete_record, read_record, save_record
from shardpipe.journal.markers import JobKeys, JobMarker, conflict, read_marker
from shardpipe.storage.keys import JOB_DIR
from shardpipe.storage.resolve import ResolvedStore
from shardpipe.stored.metadata import metadata_bytes
from shardpipe.stored.places import check_target, discard_zarr_temporaries
from shardpipe.write.resume import Resume, check_same_job, forget_finished


def create_array(
    target: ResolvedStore,
    create_kwargs: dict[str, Any],
    overwrite: bool,
    write_target: WriteTarget,
    holder: JobMarker | None = None,
    *,
    metadata: ArrayV3Metadata | None = None,
    identity: dict[str, Any] | None = None,
    run: str | None = None,
) -> WriteTarget:
    """Check the target again (it may have changed since planning), then write the metadata.

    ``holder`` is this job's marker, when it holds one (taken just before:
    the marker is not read again); without it, a marker of another job that
    may still run is an error. With ``identity``, the
    job record is saved just before the metadata (see
    :mod:`shardpipe.write.resume`), after the groups above the array: an array
    whose ``zarr.json`` is there always has its record and its groups,
    whatever stopped the write (a full disk, ``kill -9``), and a record
    without a ``zarr.json`` is a write that a resumed one simply starts
    again. Returns ``write_target`` unchanged, so that tasks can depend on
    the metadata being written.

    ``metadata`` is what zarr made of ``create_kwargs`` when the write was
    planned. An array at the store's root (no group above it to create) is
    given that document directly, one ``put``; an array under a path is
    created by zarr, once the groups above it are there (created where
    missing; an array among them is refused).

    ``run`` is unique to this run of the write and goes into the job record:
    a rerun of this task (Dask runs it again when the worker holding its
    result dies) finds the array made by its own first run and leaves it, and
    the shards other tasks published into it, alone (a first run that died
    between the record and the metadata is carried on here).
    """
    ours = run is not None and identity is not None and _made_by_run(target, run)
    if ours and target.shards.size(target.key("zarr.json")) is not None:
        return write_target
    if holder is None:
        check_no_other_job(target, None, "write the array")
    discard_zarr_temporaries(target)  # of a zarr.json whose write was killed
    check_target(target, overwrite)
    if overwrite:
        _remove_node(target)
    _create_groups_above(target)
    if identity is not None:
        save_record(target, identity, "running", run)
    if metadata is not None and not target.path:
        target.shards.put(target.key("zarr.json"), [metadata_bytes(metadata)])
    else:
        zarr.create_array(target.zarr_store_for_writes, name=target.path or None, **create_kwargs)
    target.shards.make_durable(metadata_keys(target))
    return write_target


def _create_groups_above(target: ResolvedStore) -> None:
    """Create the groups above the array that are missing, from the root down.

    zarr writes them beside the array's ``zarr.json``, in no set order: a
    write stopped there would leave an array whose groups are missing, which a
    resumed write (the array made) does not create. Created first, they are
    there whenever the array's ``zarr.json`` is.

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        When one of them is an array (which holds no other node), before
        anything is written there.
    """
    if not target.path:  # an array at the store's root has no group above it
        return
    parts = target.path.split("/")[:-1]
    for depth in range(len(parts) + 1):
        path = "/".join(parts[:depth])
        document = target.shards.get(f"{path}/zarr.json" if path else "zarr.json")
        if document is None:
            store = target.zarr_store_for_writes
            zarr.open_group(store, path=path or None, mode="a", zarr_format=3)
        elif _is_array(document):
            raise InvalidArgumentError(
                "path",
                f"{target.path!r} lies inside the array at {advice.place(path)}, and an array "
                "holds no other node",
                "Write to a path outside it (or inside a group)",
            )


def _is_array(document: bytes) -> bool:
    """Whether a ``zarr.json`` document is an array's (one that does not parse is left to zarr)."""
    try:
        parsed = json.loads(document)
    except (ValueError, RecursionError):
        return False
    return isinstance(parsed, dict) and parsed.get("node_type") == "array"


def metadata_keys(target: ResolvedStore) -> list[str]:
    """The ``zarr.json`` of the node at ``target`` and of every group above it."""
    parts = target.path.split("/") if target.path else []
    return ["/".join([*parts[:n], "zarr.json"]) for n in range(len(parts), -1, -1)]


def _made_by_run(target: ResolvedStore, run: str) -> bool:
    """Whether the array at ``target`` was created by the run ``run`` of a write."""
    try:
        record = read_record(target)
    except MetadataError:  # unreadable: not ours (an overwrite deletes it)
        return False
    return record is not None and record.get("run") == run


def record_complete(
    report: WriteReport, target: ResolvedStore, identity: dict[str, Any], skipped: int
) -> WriteReport:
    """Last task of a delayed write: mark its job record complete."""
    save_record(target, identity, "complete")
    return replace(report, shards_skipped=skipped)


def check_metadata_written(
    target: ResolvedStore,
    write_target: WriteTarget,
    identity: dict[str, Any] | None = None,
    resume: Resume = False,
) -> WriteTarget:
    """First task of a delayed write into an array whose metadata is already written.

    A resumed write (``resume``) checks its job record again: another job may
    have replaced the array since the write was planned.
    """
    check_no_other_job(target, None, "write the array")
    if resume and identity is not None:
        check_same_job(target, identity, resume)
    return write_target


def check_no_other_job(target: ResolvedStore, holder: JobMarker | None, doing: str) -> None:
    """Refuse to go on while another job that may still run holds the array."""
    keys = JobKeys(target.key(""))
    other = read_marker(target.shards, keys)
    if other is not None and (holder is None or other.job != holder.job) and not other.is_stale():
        raise conflict(other, keys, doing)


def _remove_node(target: ResolvedStore) -> None:
    """Delete every key of the node at the target except shardpipe's own records.

    The job record and the records of finished update shards go first: until
    the old shards are all gone, no record may vouch for them (see
    :mod:`shardpipe.write.resume`).
    """
    store = target.shards
    delete_record(target)
    forget_finished(target)
    prefix = target.key("")
    for key in list(store.list(prefix)):
        if not key.startswith(f"{prefix}{JOB_DIR}/"):
            store.delete(key)
