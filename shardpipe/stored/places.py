"""Checks of where data is read and written: targets, sources, temporary stores.

Each raises a :class:`~shardpipe.errors.ShardpipeError` subclass naming the
parameter, what is wrong and the fix, before any byte is written.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import dask.array as da
import zarr
from zarr.storage import LocalStore

from shardpipe.errors import (
    ArrayExistsError,
    InvalidArgumentError,
    SourceOverlapsTargetError,
    StoreNotWritableError,
)
from shardpipe.storage.urls import check_location
from shardpipe.stored.locations import Location, source_locations, store_location

if TYPE_CHECKING:  # resolve_store checks its path here: import it only where it is used
    from shardpipe.storage.resolve import ResolvedStore


from shardpipe.core.checks import check_options, shown


def check_source_is_not_target(arr: da.Array, target: ResolvedStore) -> None:
    """Refuse a write whose target is, contains or lies inside an array it reads."""
    where = store_location(target.zarr_store, target.path)
    if where is None:
        return
    for source in source_locations(arr):
        if source.overlaps(where):
            raise SourceOverlapsTargetError(
                "store",
                f"the target {where} overlaps the zarr array {source} that the Dask array "
                "reads; writing would destroy the data before it is read",
                "Write to another path (then delete the old array and move the new one "
                "into place), or use shardpipe's rechunking into a new path",
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
    from zarr.core.sync import sync

    if sync(store.exists(target.key("zarr.json"))):
        where = target.path or "the store root"
        raise ArrayExistsError(
            f"{name}: an array or group already exists at {where!r} in {store}; "
            "pass overwrite=True to replace it, or choose another path"
        )


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


def check_temp_store(temp_store: Any, target: ResolvedStore, source: Any) -> str | None:
    """Accept None or a path or URL that does not exist and overlaps neither source nor target.

    The intermediate copy of a two-pass rechunk is written there and deleted
    afterwards: the source, the target or existing data there would be lost.
    ``source`` is what the rechunk reads (a zarr or Dask array).
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
    if isinstance(source, zarr.Array):
        read = [store_location(source.store, source.path)]
    else:
        read = list(source_locations(source)) if isinstance(source, da.Array) else []
    for other in [store_location(target.zarr_store, target.path), *read]:
        if other is not None and location.overlaps(other):
            raise InvalidArgumentError(
                "temp_store",
                f"{where!r} overlaps {other}, which the rechunk reads or writes; the "
                "intermediate copy is deleted afterwards",
                "Give a separate path for the intermediate copy",
            )
    if location.scheme == "file" and os.path.exists("/" + location.path):
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
            "Leave source_storage_options out",
        )
    return checked


def check_node_present(target: ResolvedStore, parameter: str, *, records: bool = False) -> None:
    """Refuse a target at which there is no Zarr array or group (v3 or v2) to read.

    With ``records``, shardpipe's records of an unfinished job (``.shardpipe/``)
    count as something there too (what ``repair`` cleans up).
    """
    keys = ("zarr.json", ".zarray", ".zgroup")
    if any(target.shards.get(target.key(k)) is not None for k in keys):
        return
    if records:
        from shardpipe.storage.keys import JOB_DIR

        if next(iter(target.shards.list(target.key(f"{JOB_DIR}/"))), None) is not None:
            return
    where = target.path or "the store root"
    raise InvalidArgumentError(
        parameter,
        f"there is no Zarr array or group at {where!r} of {target.zarr_store} (no zarr.json, "
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
