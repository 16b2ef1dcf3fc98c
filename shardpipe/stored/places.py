"""Checks of where data is read and written: targets, sources, temporary stores.

Each raises a :class:`~shardpipe.errors.ShardpipeError` subclass naming the
parameter, what is wrong and the fix, before any byte is written.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import dask.array as da
from zarr.storage import LocalStore

from shardpipe import advice
from shardpipe.errors import (
    ArrayExistsError,
    InvalidArgumentError,
    SourceOverlapsTargetError,
    StoreNotWritableError,
)
from shardpipe.storage.keys import JOB_DIR, TEMPORARY_SUFFIX
from shardpipe.storage.local.temporary import ZARR_TEMPORARY, is_zarr_temporary, writer_may_run
from shardpipe.storage.option_names import check_storage_options
from shardpipe.storage.urls import check_location
from shardpipe.stored.locations import (
    Location,
    locations_read,
    resolved_name,
    source_locations,
    store_location,
    store_name,
)

if TYPE_CHECKING:  # resolve_store checks its path here: import it only where it is used
    from shardpipe.storage.resolve import ResolvedStore


from shardpipe.core.checks import check_options, shown


def check_reads_apart(
    target: ResolvedStore,
    reads: Iterable[Location | ResolvedStore | None],
    *,
    parameter: str,
    fix: str,
) -> None:
    """The one overlap rule: refuse a target that is, contains or lies inside what the job reads.

    Every job that reads one place and writes another calls it before it
    removes or writes anything, with or without ``overwrite``: a target over
    its own source would destroy the data before it is read (removed by
    ``overwrite``, or replaced shard by shard). Places are compared resolved:
    real paths on local disks, scheme and bucket plus prefix on object
    stores, the store itself in memory. Places of unknown kinds (None) are
    not compared.

    Parameters
    ----------
    target : ResolvedStore
        What the job writes.
    reads : iterable of Location, ResolvedStore or None
        What it reads.
    parameter : str
        The parameter naming the target, for the message.
    fix : str
        What to do instead.

    Raises
    ------
    shardpipe.errors.SourceOverlapsTargetError
        Naming both places.
    """
    where = store_location(target.zarr_store, target.path)
    if where is None:
        return
    for read in reads:
        source = read if read is None or isinstance(read, Location) else _placed(read)
        if source is None or not source.overlaps(where):
            continue
        relation = (
            "is"
            if source == where
            else "contains"
            if source.path.startswith(where.path + "/") or not where.path
            else "lies inside"
        )
        raise SourceOverlapsTargetError(
            parameter,
            f"the target {where} {relation} {source}, which this job reads; writing there "
            "would destroy the data before it is read",
            fix,
        )


def _placed(store: ResolvedStore) -> Location | None:
    return store_location(store.zarr_store, store.path)


def check_source_is_not_target(arr: da.Array, target: ResolvedStore) -> None:
    """Refuse a write whose target is, contains or lies inside a zarr array ``arr`` reads."""
    check_reads_apart(
        target,
        source_locations(arr),
        parameter="store",
        fix="Write to another path (then delete the old array and move the new one into "
        "place), or use shardpipe's rechunking into a new path",
    )


def check_target(target: ResolvedStore, overwrite: bool, name: str = "store") -> None:
    """Refuse a read-only store, or an existing node at the path without ``overwrite``.

    ``name`` is the parameter the messages name (``"target"`` for a rechunk).
    """
    store = target.zarr_store
    if store.read_only:
        raise StoreNotWritableError(f"{name}: {store} is read-only; open it with read_only=False")
    if isinstance(store, LocalStore):
        root = str(store.root)
        probe = root
        while not os.path.exists(probe):
            parent = os.path.dirname(probe)
            if parent == probe:
                break
            probe = parent
        if not os.path.isdir(probe) or not os.access(probe, os.W_OK | os.X_OK):
            raise StoreNotWritableError(
                f"{name}: cannot write under {root!r} ({probe!r} is not a writable directory); "
                "choose a directory you can write to"
            )
    if overwrite:
        return
    # One listing answers both questions for a new place (nothing there); the
    # ``zarr.json`` is looked up only when something else was found first.
    # Through the backend: on an object store, zarr's own client would be made
    # for one call.
    has_metadata, foreign = _first_foreign_key(target)
    if has_metadata or (
        foreign is not None and target.shards.size(target.key("zarr.json")) is not None
    ):
        raise ArrayExistsError(
            f"{advice.name(name)}: an array or group already exists at "
            f"{advice.place(target.path, store_name(store))}; "
            f"pass {advice.setting('overwrite')} to replace it, or choose another path"
        )
    if foreign is not None:
        _refuse_foreign(target, name, foreign, None)


def check_nothing_else_there(
    target: ResolvedStore, name: str = "store", replace: str | None = None
) -> None:
    """Refuse a target that holds something other than a Zarr v3 node and shardpipe's records.

    A Zarr v2 array or group, or files of some other kind (a folder of notes,
    another tool's output under an S3 prefix), would end up mixed with the new
    array's shards; ``overwrite=True`` replaces them instead. One listing of
    the target's keys, stopped at the first key that is not shardpipe's own.
    ``replace`` is what replaces it (default ``overwrite=True``, in the
    caller's terms).
    """
    _, foreign = _first_foreign_key(target)
    if foreign is not None:
        _refuse_foreign(target, name, foreign, replace)


def _first_foreign_key(target: ResolvedStore) -> tuple[bool, str | None]:
    """One listing of the target, stopped at the first key that is not its own.

    Returns whether the target's ``zarr.json`` was listed before the stop, and
    that key (relative to the target): neither the ``zarr.json``, nor
    shardpipe's records, nor a temporary file of zarr's, nor one of
    shardpipe's whose writer is gone (the job removes those of the
    ``zarr.json``, :func:`discard_metadata_temporaries`); None when there is none.
    """
    prefix = target.key("")
    records = f"{JOB_DIR}/"
    has_metadata = False
    for key in target.shards.list(prefix):
        relative = key[len(prefix) :]
        if relative == "zarr.json":
            has_metadata = True
        elif not (
            relative.startswith(records)
            or ZARR_TEMPORARY.fullmatch(relative)
            or _left_behind(target, key)
        ):
            return has_metadata, relative
    return has_metadata, None


def _left_behind(target: ResolvedStore, key: str) -> bool:
    """Whether ``key`` is a temporary file of shardpipe's whose writer is gone (local disks)."""
    store = target.zarr_store
    if not key.endswith(TEMPORARY_SUFFIX) or not isinstance(store, LocalStore):
        return False
    return not writer_may_run(os.path.join(str(store.root), key))


def _refuse_foreign(target: ResolvedStore, name: str, relative: str, replace: str | None) -> None:
    what = {".zarray": "a Zarr v2 array", ".zgroup": "a Zarr v2 group"}.get(
        relative, f"{relative!r}, which is no Zarr v3 node"
    )
    raise ArrayExistsError(
        f"{advice.name(name)}: {advice.place(target.path, resolved_name(target))} is "
        "not empty: it "
        f"holds {what}; pass {replace or advice.setting('overwrite')} to replace what is "
        "there, or "
        "choose an empty or new place"
    )


def discard_metadata_temporaries(target: ResolvedStore, path: str = "") -> int:
    """Remove the temporary files of the ``zarr.json`` of the node at ``path`` left by a kill.

    A process killed inside a write of a ``zarr.json`` on a local disk leaves
    the document's temporary file beside it: zarr's
    (:data:`~shardpipe.storage.local.temporary.ZARR_TEMPORARY`, of a node
    under a path), on which zarr warns at every listing of the node, or
    shardpipe's own (an array at the store's root, put whole). Either way
    the node is not empty. zarr's name does not say who writes it, so this is
    called only by a job about to write the node's ``zarr.json`` itself (no
    other shardpipe job holds the node then; a zarr-python process writing
    the same document at that moment would see its rename fail); shardpipe's
    names say it, and those of a writer still running are left alone. Other
    stores write documents whole, in one request: nothing is listed for them.
    Returns how many were removed.
    """
    if not isinstance(target.zarr_store, LocalStore):
        return 0
    folder = target.key(path) if path else target.path
    within = f"{folder}/" if folder else ""
    zarrs = [k for k in target.shards.list(f"{within}zarr.") if is_zarr_temporary(k, folder)]
    ours = [k for k in target.shards.list(f"{within}.zarr.json.") if _left_behind(target, k)]
    for key in zarrs + ours:
        target.shards.delete(key)
    return len(zarrs) + len(ours)


def check_not_a_file(target: ResolvedStore, parameter: str) -> None:
    """Refuse a local target that is a file, or lies under one (a folder is expected).

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        Naming ``parameter`` and the file.
    """
    store = target.zarr_store
    if not isinstance(store, LocalStore):
        return
    where = os.path.join(str(store.root), target.path) if target.path else str(store.root)
    probe = where
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            return
        probe = parent
    if os.path.isdir(probe):
        return
    problem = (
        f"{where!r} is a file, not a folder"
        if probe == where
        else f"{where!r} lies under the file {probe!r}, not under a folder"
    )
    raise InvalidArgumentError(
        parameter, problem, "Pass a folder (it is created when absent), or move the file away"
    )


# -- generic checks, shared by the public functions -------------------------------------------


def _location_of(url: str) -> Location:
    """Where a local path or an fsspec URL points (for overlap checks; nothing is opened)."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme in ("file", "local"):
        local = os.path.realpath(rest if sep else url)
        return Location("file", "", local.strip("/"))
    return Location(scheme, "", rest.strip("/"))


def check_temp_store(
    temp_store: Any, target: ResolvedStore, source: Any, recorded: str | None = None
) -> str | None:
    """Accept None or a path or URL that does not exist and overlaps neither source nor target.

    The intermediate copy of a two-pass rechunk is written there and deleted
    afterwards: the source, the target or existing data there would be lost.
    ``source`` is what the rechunk reads (a zarr or Dask array). ``recorded``
    is where the target's record says an interrupted rechunk left its copy:
    that path may exist (the same call again carries on from it).
    """
    if temp_store is None:
        return None
    if not isinstance(temp_store, str | os.PathLike):
        raise InvalidArgumentError(
            "temp_store",
            f"expected a local path or fsspec URL, got {shown(temp_store)}",
            "Pass e.g. temp_store='/scratch/tmp.zarr'",
        )
    where = check_location("temp_store", temp_store)
    location = _location_of(where)
    for other in [store_location(target.zarr_store, target.path), *locations_read(source)]:
        if other is not None and location.overlaps(other):
            raise InvalidArgumentError(
                "temp_store",
                f"{where!r} overlaps {other}, which the rechunk reads or writes; the "
                "intermediate copy is deleted afterwards",
                "Give a separate path for the intermediate copy",
            )
    if location.scheme == "file" and os.path.exists("/" + location.path) and where != recorded:
        raise InvalidArgumentError(
            "temp_store",
            f"{where!r} exists; the intermediate copy would replace it and then delete it",
            "Give a path that does not exist yet",
        )
    return where


def check_source_options(source: Any, options: Any) -> dict[str, Any] | None:
    """Check ``source_storage_options``: a dict, given only for a source named by URL."""
    checked = check_options("source_storage_options", options)
    if not checked:
        return checked
    is_url = isinstance(source, str | os.PathLike) and "://" in os.fspath(source)
    if not is_url or os.fspath(source).startswith("file://"):
        raise InvalidArgumentError(
            "source_storage_options",
            f"{sorted(checked)} do not apply to the source {source!r}: they are for sources "
            "given as a URL (s3://...)",
            f"Leave {advice.name('source_storage_options')} out",
        )
    return check_storage_options("source_storage_options", source, checked)


def check_node_present(target: ResolvedStore, parameter: str, *, records: bool = False) -> None:
    """Refuse a target at which there is no Zarr array or group (v3 or v2) to read.

    With ``records``, shardpipe's records of an unfinished job
    (:data:`~shardpipe.storage.keys.JOB_DIR`) count as something there too (what
    ``repair`` cleans up).
    """
    keys = ("zarr.json", ".zarray", ".zgroup")
    if any(target.shards.get(target.key(k)) is not None for k in keys):
        return
    if records and next(iter(target.shards.list(target.key(f"{JOB_DIR}/"))), None) is not None:
        return
    raise InvalidArgumentError(
        parameter,
        "there is no Zarr array or group at "
        f"{advice.place(target.path, resolved_name(target))} (no zarr.json, "
        ".zarray or .zgroup)",
        "Check the store and path: they must name an existing array or group",
    )


def resolve_named(name: str, store: Any, path: Any, storage_options: Any) -> ResolvedStore:
    """Resolve like :func:`~shardpipe.storage.resolve.resolve_store`; errors name ``name``."""
    from shardpipe.storage.resolve import resolve_store

    try:
        return resolve_store(store, path, storage_options)
    except InvalidArgumentError as err:
        if type(err) is not InvalidArgumentError or err.parameter != "store":
            raise
        raise InvalidArgumentError(name, err.problem, err.fix) from None


def check_store_like(name: str, store: Any) -> None:
    """Accept what zarr opens as a store: a path, a URL, a zarr ``Store`` or a mapping."""
    from zarr.abc.store import Store

    if not isinstance(store, str | os.PathLike | Store | Mapping):
        raise InvalidArgumentError(
            name,
            f"expected a local path, an fsspec URL or a zarr Store, got {shown(store)}",
            "Pass e.g. '/data/dataset.zarr' or 's3://bucket/dataset.zarr'",
        )
    if isinstance(store, str | os.PathLike):
        check_location(name, store)
