"""Migrate draft sharded arrays (storage-transformer era) to Zarr v3 (``shardpipe.migrate``).

A hierarchy written with the sharding storage-transformer draft (see
:mod:`shardpipe.legacy_metadata`) becomes a Zarr v3 hierarchy whose arrays
use the ``sharding_indexed`` codec, without decoding or re-encoding a
chunk: every shard object is copied byte for byte to its v3 key
(``data/root/a/x/c0/1`` to ``a/x/c/0/1``), with a 4-byte CRC32C of its
index appended when ``add_crc32c``. With ``zlib_as_gzip`` the shards of
zlib arrays are rebuilt instead: each chunk's DEFLATE data is kept and
re-wrapped as a gzip member (:mod:`shardpipe.zlib_rewrap`), so that
tensorstore (which has no zlib codec) reads them too.

Order of the steps, and what a reader sees (``kill -9`` at any instant):

1. Every draft document is read and translated (and the translation
   checked as zarr reads it), and every shard's index read, before anything
   is written: what v3 cannot express, or a shard whose index is broken,
   stops the migration with nothing written. So does a key where the
   migration would write (a target that is not empty; in place, a key
   under the v3 folder of an array, or a group's ``zarr.json``).
2. A marker (``.shardpipe/migrate.json``) is written at the target. It
   names the source, whether in place, and every document and array the
   migration writes.
3. Every shard is copied to its new key, each copy atomic: inside one store
   without passing through this process (a hard link on a local disk, a
   file copy with ``add_crc32c``; S3 ``UploadPartCopy`` for shards of at
   least 5 MiB); to another store in parts of at most 8 MiB (a multipart
   upload on S3), one part in memory per copy. With ``zlib_as_gzip`` a
   chunk that is not a whole zlib stream stops the migration here (the
   source untouched); running it again without ``zlib_as_gzip`` copies the
   shards unchanged.
4. The ``zarr.json`` of every array and group but the root is written,
   then the root's last, replacing the draft's entry point when migrating
   in place. Until this step the source is untouched and the old tool
   reads it as before; from it on, zarr-python 3 and tensorstore read the
   migrated hierarchy.
5. In place only: the draft's keys (``meta/``, ``data/``) are deleted.
6. The marker is deleted.

Running ``migrate`` again after an interruption finishes the job. Before
step 4 it starts over: the open multipart uploads of the interrupted run
are aborted, what it wrote that the new run would not write (shards the
draft no longer has, documents of nodes gone) is deleted, and the copies
are repeated, with the options of the new run; keys where a node added to
the draft since would go are refused, as at a first run. After step 4 (in
place, the marker naming this source) it only deletes what is left of the
draft (step 5) and the marker. A target holding the marker of another
source's migration is refused.
"""

from __future__ import annotations

import itertools
import json
import os
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from shardpipe.checks import check_bool, check_int
from shardpipe.errors import InvalidArgumentError, ShardFormatError
from shardpipe.formats.base import read_checked_index
from shardpipe.legacy_hierarchy import read_draft, read_json, shard_target
from shardpipe.legacy_metadata import LegacyArray, is_draft_entry_point
from shardpipe.migrate_copy import DraftShard, copy_shard
from shardpipe.storage.resolve import ResolvedStore
from shardpipe.store_checks import resolve_named

SHARD_KEY = re.compile(r"c(?:[./][0-9]+)*")
"""A shard key of the default chunk key encoding, relative to its array."""
MARKER = ".shardpipe/migrate.json"
STAGING = ".shardpipe/migrate-staging"


@dataclass
class MigrateReport:
    """What :func:`migrate` did (or, with ``dry_run``, would do).

    Attributes
    ----------
    arrays, groups : list of str
        Paths of the arrays and groups migrated (``""`` is the root).
    shards : int
        Shard objects copied.
    nbytes : int
        Their bytes (as stored in the draft).
    rebuilt : int
        Of those, shards of zlib arrays rebuilt with their chunks re-wrapped
        as gzip (``zlib_as_gzip``); the others are copied byte for byte.
    dry_run : bool
        Nothing was written.
    in_place : bool
        The source became the v3 hierarchy (else it was copied to a target).
    finished_earlier : bool
        An interrupted in-place migration had already written the v3
        hierarchy: only the draft's leftovers were deleted.
    """

    arrays: list[str] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)
    shards: int = 0
    nbytes: int = 0
    rebuilt: int = 0
    dry_run: bool = False
    in_place: bool = True
    finished_earlier: bool = False

    def __str__(self) -> str:
        verb = "would migrate" if self.dry_run else "migrated"
        where = "in place" if self.in_place else "to the target"
        if self.finished_earlier:
            done = "would be" if self.dry_run else "were"
            return f"the v3 hierarchy was already written; the draft's leftovers {done} deleted"
        rebuilt = (
            f"; {self.rebuilt} zlib shard(s) rebuilt, chunks re-wrapped as gzip with their "
            "DEFLATE data unchanged"
            if self.rebuilt
            else ""
        )
        return (
            f"{verb} {len(self.arrays)} array(s) and {len(self.groups)} group(s) {where}: "
            f"{self.shards} shard(s), {self.nbytes:,} bytes, payload unchanged{rebuilt}"
        )


@dataclass
class _Plan:
    arrays: list[LegacyArray]
    groups: dict[str, dict[str, Any]]
    shards: list[DraftShard]

    def documents(self) -> dict[str, dict[str, Any]]:
        """The v3 ``zarr.json`` of every node by key (relative), the root's last."""
        nodes = {a.path: a.document for a in self.arrays} | self.groups
        return {
            f"{path}/zarr.json" if path else "zarr.json": nodes[path]
            for path in sorted(nodes, key=lambda p: (p == "", p))
        }

    def array_paths(self) -> list[str]:
        """The paths of its arrays."""
        return [a.path for a in self.arrays]


def migrate(
    source: Any,
    target: Any = None,
    *,
    add_crc32c: bool = False,
    zlib_as_gzip: bool = False,
    storage_options: dict[str, Any] | None = None,
    target_storage_options: dict[str, Any] | None = None,
    dry_run: bool = False,
    workers: int = 8,
    progress: bool = False,
) -> MigrateReport:
    """Turn a hierarchy written with the sharding storage-transformer draft into Zarr v3.

    Parameters
    ----------
    source : str or os.PathLike
        The draft hierarchy: a local path or an fsspec URL (``s3://...``).
    target : str or os.PathLike, optional
        Where to write the v3 hierarchy; None (the default) migrates in place.
        A target must be empty (or hold an interrupted migration).
    add_crc32c : bool
        Append a CRC32C to every shard index (the index codecs become
        ``bytes`` + ``crc32c``); chunk bytes are never touched.
    zlib_as_gzip : bool
        Give zlib arrays the ``gzip`` codec and re-wrap their chunks (the
        DEFLATE data unchanged; a gzip header and trailer instead of zlib's),
        rebuilding their shards; without it they get ``numcodecs.zlib``,
        which zarr-python reads and tensorstore does not.
    storage_options : dict, optional
        fsspec options for the source (and the target, unless
        ``target_storage_options`` are given).
    target_storage_options : dict, optional
        fsspec options for a target elsewhere (a local draft to ``s3://``).
    dry_run : bool
        Read and translate everything, report, write nothing.
    workers : int
        Shards copied at the same time.
    progress : bool
        Show a ``tqdm.auto`` bar over the bytes of the shards copied.

    Returns
    -------
    MigrateReport

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        When the source holds no draft hierarchy, an array uses something
        Zarr v3 cannot express (:class:`~shardpipe.legacy_metadata.UnsupportedLegacyError`),
        or the target is not empty. Nothing is written.
    shardpipe.errors.ShardFormatError
        When a shard's index is broken. Nothing is written.
    """
    add_crc32c = check_bool("add_crc32c", add_crc32c)
    zlib_as_gzip = check_bool("zlib_as_gzip", zlib_as_gzip)
    dry_run = check_bool("dry_run", dry_run)
    workers = check_int("workers", workers, example=8)
    progress = check_bool("progress", progress)
    src = resolve_named("source", source, None, storage_options)
    if target is None and target_storage_options is not None:
        raise InvalidArgumentError(
            "target_storage_options",
            "given without a target (an in-place migration uses storage_options)",
            "Pass a target, or leave target_storage_options out",
        )
    if target_storage_options is None:
        target_storage_options = storage_options
    dst = src if target is None else resolve_named("target", target, None, target_storage_options)
    in_place = target is None
    entry = read_json(src.shards, src.key("zarr.json"))
    if not is_draft_entry_point(entry):
        marker = read_json(src.shards, src.key(MARKER)) if in_place else None
        if marker and marker.get("in_place") is True and marker.get("source") == _name(source):
            if not dry_run:
                _delete_draft(src)
                _drop_marker(src)
            return MigrateReport(dry_run=dry_run, finished_earlier=True)
        raise InvalidArgumentError(
            "source",
            f"{source!r} holds no hierarchy of the sharding storage-transformer draft (its "
            "zarr.json is missing or is not the draft's entry point)",
            "Pass the folder or URL whose zarr.json names "
            "https://purl.org/zarr/spec/protocol/core/3.0",
        )
    plan = _plan(src, add_crc32c, zlib_as_gzip)
    earlier = read_json(dst.shards, dst.key(MARKER))
    if in_place:
        _refuse_clashes(plan)
        _refuse_strays(src, plan)
    if earlier is not None and not in_place and earlier.get("source") != _name(source):
        raise InvalidArgumentError(
            "target",
            f"{target!r} holds an interrupted migration of {earlier.get('source')!r}, "
            f"not of {_name(source)!r}",
            "Run migrate again with that source to finish it, or pass an empty target",
        )
    _refuse_occupied(dst, target, plan, earlier)
    report = MigrateReport(
        arrays=[a.path for a in plan.arrays],
        groups=sorted(plan.groups),
        shards=len(plan.shards),
        nbytes=sum(s.size for s in plan.shards),
        rebuilt=sum(s.array.zlib_to_gzip for s in plan.shards),
        dry_run=dry_run,
        in_place=in_place,
    )
    if dry_run:
        return report
    _start(dst, {"source": _name(source), "in_place": in_place}, plan, earlier)
    with ThreadPoolExecutor(workers) as pool:
        copies = pool.map(
            lambda shard: copy_shard(src, dst, shard, add_crc32c, STAGING), plan.shards
        )
        try:
            _follow(copies, plan.shards, progress)
        except BaseException:
            pool.shutdown(cancel_futures=True)  # the copies not started yet
            raise
    for key, document in plan.documents().items():  # the root's last
        dst.shards.put(dst.key(key), [json.dumps(document, indent=2).encode()])
    dst.shards.discard_staging(dst.key(STAGING))
    if in_place:
        _delete_draft(src)
    _drop_marker(dst)
    return report


def _name(source: Any) -> str:
    """How the marker names a source: a URL as given, a local path made absolute."""
    text = os.fspath(source) if isinstance(source, os.PathLike) else str(source)
    return text.rstrip("/") if "://" in text else os.path.abspath(text)


def _shard_keys(dst: ResolvedStore, array: str) -> Iterator[str]:
    """The keys naming a shard (``c``, ``c/0/1``, ``c.0.1``) in the v3 folder of ``array``.

    Only those: at the root (a root array) other keys may start with ``c``.
    """
    folder = dst.key(f"{array}/" if array else "")
    for key in dst.shards.list(f"{folder}c"):
        if SHARD_KEY.fullmatch(key[len(folder) :]):
            yield key


def _start(
    dst: ResolvedStore, run: dict[str, Any], plan: _Plan, earlier: dict[str, Any] | None
) -> None:
    """Write the marker; after an interrupted run, clear what it left that this one won't write.

    The marker holds ``run`` (the source and whether in place) and lists
    every document and array of this run and of the interrupted one, before
    anything is deleted: a run killed while clearing is cleared by the next.
    """
    documents, arrays = list(plan.documents()), plan.array_paths()
    old_documents = [str(k) for k in (earlier or {}).get("documents", [])]
    old_arrays = [str(p) for p in (earlier or {}).get("arrays", [])]
    marker = {
        **run,
        "documents": sorted(set(documents) | set(old_documents)),
        "arrays": sorted(set(arrays) | set(old_arrays)),
    }
    dst.shards.put(dst.key(MARKER), [json.dumps(marker, indent=2).encode()])
    if earlier is not None:
        _clear_leftovers(dst, plan, marker["arrays"], old_documents)


def _clear_leftovers(
    dst: ResolvedStore, plan: _Plan, arrays: list[str], documents: list[str]
) -> None:
    """Abort open uploads; delete the shards of ``arrays`` and the ``documents`` not planned."""
    for array in arrays:  # open uploads aborted, temporary files removed
        dst.shards.cleanup(dst.key(STAGING), dst.key(f"{array}/c" if array else "c"))
    planned = {dst.key(shard.v3_key) for shard in plan.shards}
    for array in arrays:
        stale = [key for key in _shard_keys(dst, array) if key not in planned]
        for key in stale:
            dst.shards.delete(key)
        if stale and array:
            dst.shards.prune(dst.key(f"{array}/c"))
    for key in set(documents) - set(plan.documents()):
        dst.shards.delete(dst.key(key))
        dst.shards.prune(dst.key(key.rpartition("/")[0]))


def _follow(copies: Iterator[None], shards: list[DraftShard], progress: bool) -> None:
    """Wait for every copy (in order), a bar counting their bytes with ``progress``."""
    from tqdm.auto import tqdm

    total = sum(s.size for s in shards)
    with tqdm(total=total, unit="B", unit_scale=True, desc="migrate", disable=not progress) as bar:
        for shard, _ in zip(shards, copies, strict=True):
            bar.update(shard.size)


def _drop_marker(dst: ResolvedStore) -> None:
    """Delete the marker, and what a kill while writing it may have left beside it."""
    dst.shards.delete(dst.key(MARKER))
    dst.shards.cleanup(dst.key(STAGING), dst.key(MARKER))  # a temporary file of the marker
    dst.shards.prune(dst.key(".shardpipe/"))


def _plan(src: ResolvedStore, add_crc32c: bool, zlib_as_gzip: bool) -> _Plan:
    """Translate every node and read every shard's index (nothing written)."""
    draft = read_draft(src, add_crc32c=add_crc32c, zlib_as_gzip=zlib_as_gzip, strict=True)
    assert draft is not None  # the entry point was read just now
    shards = [shard for array in draft.arrays for shard in _shards(src, array)]
    return _Plan(draft.arrays, draft.groups, shards)


def _shards(src: ResolvedStore, array: LegacyArray) -> Iterator[DraftShard]:
    """Every shard of ``array``, its index read and checked."""
    prefix = shard_target(src, array).key("")
    fmt = array.shard_format
    for key in src.shards.list(prefix + fmt.key_head):
        coords = fmt.coords(key[len(prefix) :], array.shard_grid)
        if coords is None:
            raise ShardFormatError(
                f"{key!r} lies among the shards of array {array.path or '/'!r} but names none "
                "of them; move it away and run migrate again"
            )
        size = src.shards.size(key)
        if size is None:
            continue

        def read(start: int, stop: int, key: str = key) -> bytes:
            return src.shards.get_range(key, start, stop)

        read_checked_index(fmt, read, size, key, shard=coords)
        yield DraftShard(array, key, coords, size)


def _refuse_clashes(plan: _Plan) -> None:
    """In place, a node named ``meta`` or ``data`` at the top would be deleted with the draft."""
    for path in [a.path for a in plan.arrays] + list(plan.groups):
        if path.split("/")[0] in ("meta", "data"):
            raise InvalidArgumentError(
                "source",
                f"node {path!r} would lie under the draft's own {path.split('/')[0]}/ folder, "
                "which an in-place migration deletes",
                "Migrate to another target",
            )


def _refuse_strays(src: ResolvedStore, plan: _Plan) -> None:
    """In place, every key under ``meta/`` and ``data/`` must be a planned document or shard.

    The last step deletes those folders: anything else there would be lost.
    """
    meta = src.key("meta/")
    shard_keys = {shard.key for shard in plan.shards}
    for prefix in ("meta/", "data/"):
        for key in src.shards.list(src.key(prefix)):
            name = key[len(meta) :] if key.startswith(meta) else ""
            document = name.startswith("root") and name.endswith((".array.json", ".group.json"))
            if key in shard_keys or (key.startswith(meta) and document):
                continue
            raise InvalidArgumentError(
                "source",
                f"{key!r} lies under the draft's {prefix} folder but is no document or shard of "
                "it; an in-place migration deletes that folder",
                "Move it away, or migrate to another target",
            )


def _refuse_occupied(
    dst: ResolvedStore, target: Any, plan: _Plan, earlier: dict[str, Any] | None
) -> None:
    """Refuse a key where this run would write that no run of this migration wrote.

    A target must be empty at the first run. In place (and at a re-run, for
    the nodes the interrupted run did not plan) no shard key may lie in the
    v3 folder of an array, nor a node's ``zarr.json`` (but the root's, the
    draft's entry point).
    """
    if target is not None and earlier is None:
        ours = dst.key(".shardpipe/")  # a marker being written when a first run was killed
        for key in itertools.filterfalse(
            lambda k: k.startswith(ours), dst.shards.list(dst.key(""))
        ):
            raise InvalidArgumentError(
                "target",
                f"{target!r} is not empty (it holds {key!r})",
                "Pass an empty folder or URL, or leave target out to migrate in place",
            )
        return
    known_documents = set((earlier or {}).get("documents", []))
    known_arrays = set((earlier or {}).get("arrays", []))
    documents = [k for k in plan.documents() if k != "zarr.json" and k not in known_documents]
    taken = [dst.key(k) for k in documents if dst.shards.size(dst.key(k)) is not None]
    for array in set(plan.array_paths()) - known_arrays:
        taken += itertools.islice(_shard_keys(dst, array), 1)
    for key in taken:
        raise InvalidArgumentError(
            "target" if target is not None else "source",
            f"{key!r} lies where the v3 hierarchy would be written",
            "Move it away, or migrate to another target",
        )


def _delete_draft(src: ResolvedStore) -> None:
    """Delete every key of the draft (``meta/root*``, ``data/root/``)."""
    for prefix, folder in (("meta/root", "meta/"), ("data/root/", "data/")):
        for key in list(src.shards.list(src.key(prefix))):
            src.shards.delete(key)
        src.shards.prune(src.key(folder))
