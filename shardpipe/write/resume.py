"""Creating the array a write fills under its job record, and resuming an interrupted write.

A write of a new array saves a **job record** (:mod:`shardpipe.journal.job_record`)
beside the array's ``zarr.json`` (:data:`~shardpipe.storage.keys.WRITE_RECORD`) just
before the metadata is written, so before the first shard is published: an array whose
``zarr.json`` is there always has its record, whatever stopped the write (a full disk,
``kill -9``), and a record without a ``zarr.json`` is a write that a resumed one starts
again. It holds the write's identity:

* ``source``: what is written, for a Dask array its name (Dask's
  deterministic token of the graph that makes the data, so the same
  computation on the same inputs has the same name), for a rechunk the
  source's location, shape, dtype and read unit;
* ``target``: the array's ``zarr.json`` document (shape, dtype, shards,
  inner chunks, codecs, fill value, attributes);
* ``state``: ``"running"`` until the last shard is published, then
  ``"complete"``.

A resumed write (``resume=True``) keeps a shard only if all of these hold:

1. the record exists and its identity equals the new write's (else the
   write is refused, naming what differs);
2. the stored ``zarr.json`` equals the record's ``target``;
3. the shard is present, its index has the right size and CRC32C, and every
   inner chunk range lies inside the object, outside the index and apart
   from the others.

Why a shard of another job or another source is never kept by mistake: the
record is written only after every key of an earlier node at the target was
deleted (an overwrite deletes the old record *first*, then the old shards,
then writes the new record and metadata), and shards are published whole and
atomically (rename, a single PUT, a completed multipart upload). So while a
record is present, every shard under the array was published by a write with
that record's identity, and a partially written shard never shows under its
key. A job whose identity differs (another source, another layout or codecs)
is refused. The one thing the record cannot see is a source whose data
changed while its Dask name stayed the same (data edited in place under a
path the graph reads lazily): the same name means the same graph, not the
same bytes. ``resume="force"`` skips the source comparison for sources whose
name is not deterministic; it still requires the same target metadata.

**Updates** of existing arrays (``region``, ``append_dim``) cannot tell their
shards from the old ones by looking at them. Each update therefore has an identity
(:func:`update_identity`: a hash of the source's Dask name, where it goes and the
array's ``zarr.json`` before it) and saves a small record per shard once that shard is
finished and durable (under :data:`~shardpipe.storage.keys.DONE_DIR`, by identity and
sha1 of the shard key); the records go when the whole update is done. A resumed update
(``resume=True``) skips the shards recorded under its own identity. A shard left
half-changed by the interruption has an undo record instead, and is rolled back when the
next job takes the array, before it is written again. Redoing a shard is always safe
(writing the same data into the same region gives the same shard), so a record lost to a
crash costs time, not correctness. After an append whose grown ``zarr.json`` was
published, the array's metadata differs and the update's identity with it: an append
that finished must not be run again.

**Creating the array.** A planned write looks at its target once more when it
starts (another job may have taken the array, or a node appeared since
planning), saves its job record and writes the metadata, before any shard
(:func:`create_array`). These functions run in the client
(``ShardedWrite.execute``) or as the first and last tasks of a delayed write
(``ShardedWrite.to_delayed``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any, Literal

import zarr

from shardpipe import advice
from shardpipe.core.grid import Coords, ShardLayout
from shardpipe.core.plan import WritePlan
from shardpipe.engine.shard_sweep import checked_shards
from shardpipe.engine.tasks import WriteTarget
from shardpipe.errors import ArrayExistsError, InvalidArgumentError, MetadataError
from shardpipe.formats.base import ShardFormat
from shardpipe.internals.zarr_core import ArrayV3Metadata
from shardpipe.journal.job_record import delete_record, read_record, save_record
from shardpipe.journal.markers import JobKeys, JobMarker, conflict, read_marker
from shardpipe.storage.keys import JOB_DIR, WRITE_RECORD
from shardpipe.storage.resolve import ResolvedStore
from shardpipe.stored.locations import resolved_name
from shardpipe.stored.metadata import metadata_bytes
from shardpipe.stored.places import check_target, discard_metadata_temporaries
from shardpipe.write.record_differences import brief, differences

RESUME_WORKERS = 8
"""Shard indexes read at once when a resumed write looks for complete shards."""

Resume = bool | Literal["force"]


def check_resume(resume: Any, overwrite: bool) -> Resume:
    """Validate ``resume`` (False, True or ``"force"``) against ``overwrite``.

    Parameters
    ----------
    resume : Any
        The caller's ``resume`` argument.
    overwrite : bool
        The caller's (checked) ``overwrite`` argument.

    Returns
    -------
    bool or "force"
        ``resume`` itself.

    Raises
    ------
    InvalidArgumentError
        For any other value, or ``resume`` together with ``overwrite``.
    """
    if resume not in (False, True, "force") or (not isinstance(resume, bool) and resume != "force"):
        raise InvalidArgumentError(
            "resume",
            f"expected True, False or 'force', got {resume!r}",
            f"Pass {advice.setting('resume')} to carry on an interrupted write",
        )
    if resume and overwrite:
        raise InvalidArgumentError(
            "resume",
            "resume keeps what an interrupted write published, "
            f"{advice.setting('overwrite')} deletes it",
            "Pick one",
        )
    return resume  # type: ignore[no-any-return]


def check_same_job(
    target: ResolvedStore, identity: dict[str, Any], resume: Resume
) -> dict[str, Any]:
    """Refuse unless the array at ``target`` was made by a write with ``identity``.

    Returns the saved record.

    Raises
    ------
    InvalidArgumentError
        Naming ``resume``, what differs and the fix.
    """
    where = f"at {advice.place(target.path)}"
    record = read_record(target)
    if record is None:
        raise InvalidArgumentError(
            "resume",
            f"the array {where} has no shardpipe job record, so nothing shows which "
            "write made its shards",
            f"Write it again with {advice.setting('overwrite')}",
        )
    if resume != "force" and "numpy" in identity["source"]:
        raise InvalidArgumentError(
            "resume",
            "the source is a NumPy array, which shardpipe does not hash (a pass over all of "
            "it): a resumed write cannot check that it holds the interrupted write's data",
            f"Pass {advice.setting('resume', 'force')} if it does, or pass "
            "dask.array.from_array(arr) to both writes (its name is a hash of the data)",
        )
    compared = ["target"] if resume == "force" else ["source", "target"]
    different = [k for k in compared if record.get(k) != identity[k]]
    if different:
        parts = []
        if "source" in different:
            parts.append(
                f"source (recorded {brief(record.get('source'))}, this write "
                f"{brief(identity['source'])})"
            )
        if "target" in different:
            parts.append(
                f"target metadata ({', '.join(differences(record['target'], identity['target']))})"
            )
        what = " and ".join(parts) + (" differ" if len(parts) > 1 else " differs")
        hint = (
            " (if the source is the same data under a new Dask name, pass resume='force')"
            if different == ["source"]
            else ""
        )
        raise InvalidArgumentError(
            "resume",
            f"the array {where} was written by another job: its {what} from this write's{hint}",
            "Run the same write as the interrupted one, or start again with "
            f"{advice.setting('overwrite')}",
        )
    stored = target.shards.get(target.key("zarr.json"))
    try:
        stored_document = json.loads(stored) if stored is not None else None
    except (ValueError, RecursionError):
        stored_document = None
    if stored_document != identity["target"]:
        changed = ", ".join(differences(stored_document, identity["target"]))
        raise InvalidArgumentError(
            "resume",
            f"the zarr.json of the array {where} is no longer the one the interrupted write "
            f"made (changed: {changed})",
            f"Start again with {advice.setting('overwrite')}",
        )
    return record


def complete_shards(target: ResolvedStore, metadata: Any, layout: ShardLayout) -> frozenset[Coords]:
    """Shards of the array at ``target`` that are present and whose index verifies.

    The shards are found by listing the array's shard prefix (never by
    walking its grid, which may be vast and nearly empty); keys that name no
    shard of the grid are left alone. Indexes are read on
    :data:`RESUME_WORKERS` threads, a bounded number at a time.

    Parameters
    ----------
    target : ResolvedStore
        The array.
    metadata : ArrayV3Metadata
        Its metadata.
    layout : ShardLayout
        Its shard grid.

    Returns
    -------
    frozenset of shard coordinates
        Present, index of the right size, CRC32C matching, every chunk range
        inside the object, outside the index and apart from the others.
    """
    return frozenset(
        check.coords
        for check in checked_shards(target, metadata, RESUME_WORKERS, decode=False)
        if check.present and not check.problems and check.coords is not None
    )


def update_identity(source_name: str, offset: tuple[int, ...], before: Any) -> str:
    """The identity of an update: a hash of its source, its offset and the metadata before it.

    Parameters
    ----------
    source_name : str
        The Dask name of the data written.
    offset : tuple of int
        Where in the array the data goes.
    before : ArrayV3Metadata
        The array's metadata before the update (for an append: before it grows).

    Returns
    -------
    str
        32 hexadecimal digits, the folder of the update's finished-shard records.
    """
    document = {
        "source": source_name,
        "offset": list(offset),
        "before": json.loads(metadata_bytes(before)),
    }
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()[:32]


def finished_shards(
    target: ResolvedStore, update: str, plan: WritePlan, shard_format: ShardFormat
) -> frozenset[Coords]:
    """Shards of ``plan`` an interrupted run of update ``update`` recorded as finished.

    Parameters
    ----------
    target : ResolvedStore
        The array.
    update : str
        The update's identity (:func:`update_identity`).
    plan : WritePlan
        The update's plan.
    shard_format : ShardFormat
        How shard keys are named.

    Returns
    -------
    frozenset of shard coordinates
        Those with a record under ``update``.
    """
    keys = JobKeys(target.key(""))
    recorded = set(target.shards.list(f"{keys.done}{update}/"))
    return frozenset(
        coords
        for coords in plan.placement.shards()
        if keys.done_key(update, target.key(shard_format.key(coords))) in recorded
    )


def forget_finished(
    target: ResolvedStore, keep: str | None = None, listed: Sequence[str] | None = None
) -> None:
    """Delete the records of finished update shards, except those of update ``keep``.

    Called when an array is replaced (all of them), when an update starts
    (those of other updates: the shards they name may change under this one)
    and when an update completes (all of them: nothing is left to resume).
    The folders that held them go too (a file system keeps empty folders),
    so that finished updates leave nothing behind. Only the job holding the
    array's marker writes these records, so nothing writes them meanwhile.
    ``listed``: the array's keys, listed by the caller just before (not listed again).
    """
    keys = JobKeys(target.key(""))
    mine = None if keep is None else f"{keys.done}{keep}/"
    found = target.shards.list(keys.done) if listed is None else listed
    target.shards.delete_many(
        [
            key
            for key in found
            if key.startswith(keys.done) and (mine is None or not key.startswith(mine))
        ]
    )
    target.shards.prune(keys.done)


def check_new_target(target: ResolvedStore, overwrite: bool, name: str = "store") -> None:
    """:func:`~shardpipe.stored.places.check_target`, naming ``resume=True`` where it would serve.

    A write that failed or was killed leaves its array and a job record that
    says ``"running"``; rerunning the same call without ``resume`` meets the
    array. The error then says that a write did not finish there and how to
    finish it, keeping its complete shards, before how to start again.
    """
    try:
        check_target(target, overwrite, name)
    except ArrayExistsError as err:
        try:
            record = read_record(target)
        except MetadataError:
            record = None
        if record is None or record["state"] != "running":
            raise
        raise ArrayExistsError(
            f"{advice.name(name)}: a write that did not finish is at "
            f"{advice.place(target.path, resolved_name(target))} (its job record says it "
            f"was still running: it failed or was killed); pass {advice.setting('resume')} to "
            "finish it, "
            f"keeping its complete shards, or {advice.setting('overwrite')} to start again"
        ) from err


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
    discard_metadata_temporaries(target)  # of a zarr.json whose write was killed
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
    store, prefix = target.shards, target.key("")
    # listed once: every key below is among these (Icechunk keeps the job folder in its
    # store's scratch, listed apart and empty in a store just resolved, as here)
    listed = list(store.list(prefix))
    if target.key(WRITE_RECORD) in listed:
        delete_record(target)
    forget_finished(target, listed=listed)
    store.delete_many([key for key in listed if not key.startswith(f"{prefix}{JOB_DIR}/")])
