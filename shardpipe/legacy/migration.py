"""Migrate draft sharded arrays (storage-transformer era) to Zarr v3 (``shardpipe.migrate``).

A hierarchy written with the sharding storage-transformer draft (see
:mod:`shardpipe.legacy.metadata`) becomes a Zarr v3 hierarchy whose arrays
use the ``sharding_indexed`` codec, without decoding or re-encoding a
chunk: every shard object is copied byte for byte to its v3 key
(``data/root/a/x/c0/1`` to ``a/x/c/0/1``), with a 4-byte CRC32C of its
index appended when ``add_crc32c``. With ``zlib_as_gzip`` the shards of
zlib arrays are rebuilt instead: each chunk's DEFLATE data is kept and
re-wrapped as a gzip member (:mod:`shardpipe.codec.zlib_rewrap`), so that
tensorstore (which has no zlib codec) reads them too.

Order of the steps, and what a reader sees (``kill -9`` at any instant):

1. Every draft document is read and translated (and the translation
   checked as zarr reads it), and every shard's index read, before anything
   is written: what v3 cannot express, or a shard whose index is broken,
   stops the migration with nothing written. So does a key where the
   migration would write (a target that is not empty; in place, a key
   under the v3 folder of an array, or a group's ``zarr.json``).
2. A marker (:data:`~shardpipe.storage.keys.MIGRATION_MARKER`) is written at the target. It
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
draft (step 5) and the marker. After step 6, in place, the source holds a
Zarr v3 hierarchy and nothing of the draft: a rerun (after a kill in the
last instant too) finds nothing to do, removes the marker's empty folder
and succeeds.

The marker is trusted only when it names this run's source and in-place
flag and every key it lists stays inside the hierarchy
(:mod:`shardpipe.legacy.marker`); node names read from the draft's
listing are checked likewise (:mod:`shardpipe.legacy.hierarchy`). Anything
else is refused by name before a byte is written or deleted.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from shardpipe.core.checks import check_bool, check_int
from shardpipe.core.display import ShowsSummary, Summary, format_count, format_nbytes
from shardpipe.engine.progress import bar_class
from shardpipe.errors import InvalidArgumentError
from shardpipe.legacy.copy import DraftShard, copy_shard
from shardpipe.legacy.hierarchy import read_json
from shardpipe.legacy.marker import (
    MigrationMarker,
    drop_marker,
    read_marker,
    trusted_marker,
    write_marker,
)
from shardpipe.legacy.metadata import is_draft_entry_point
from shardpipe.legacy.plan import (
    MigrationPlan,
    plan_migration,
    refuse_clashes,
    refuse_occupied,
    refuse_strays,
    shard_keys,
)
from shardpipe.storage.delegating import DelegatingStore
from shardpipe.storage.keys import MIGRATION_STAGING
from shardpipe.storage.local.store import LocalShardStore
from shardpipe.storage.resolve import ResolvedStore, resolve_store
from shardpipe.stored.places import check_reads_apart
from shardpipe.write.job import Pass, PassReports, RunOptions, run_checked_job
from shardpipe.write.options import STORED_PARAMETERS
from shardpipe.write.parameters import shares_parameters


@dataclass(repr=False)
class MigrateReport(ShowsSummary):
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
        An earlier in-place migration had already written the v3
        hierarchy: only what it left (the draft's keys, its marker) was
        deleted, if anything.
    leftovers : int
        With ``finished_earlier``, the keys deleted (or, with ``dry_run``,
        to delete).
    """

    arrays: list[str] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)
    shards: int = 0
    nbytes: int = 0
    rebuilt: int = 0
    dry_run: bool = False
    in_place: bool = True
    finished_earlier: bool = False
    leftovers: int = 0

    def _summary(self) -> Summary:
        rows = [
            ("arrays", format_count(len(self.arrays))),
            ("groups", format_count(len(self.groups))),
            ("shards copied", format_count(self.shards)),
            ("bytes", format_nbytes(self.nbytes)),
            ("rebuilt (zlib as gzip)", format_count(self.rebuilt)),
            ("where", "in place" if self.in_place else "to the target"),
        ]
        if self.finished_earlier:
            rows.append(("finished earlier", f"{format_count(self.leftovers)} leftover key(s)"))
        return Summary("MigrateReport", "dry run" if self.dry_run else None, rows)

    def __str__(self) -> str:
        verb = "would migrate" if self.dry_run else "migrated"
        where = "in place" if self.in_place else "to the target"
        if self.finished_earlier and not self.leftovers:
            return (
                "nothing to migrate: a Zarr v3 hierarchy that holds nothing of the draft "
                "(migrated earlier, or never an array of the draft)"
            )
        if self.finished_earlier:
            done = "would be" if self.dry_run else "were"
            return (
                f"the v3 hierarchy was already written; the draft's leftovers "
                f"({self.leftovers} key(s)) {done} deleted"
            )
        rebuilt = (
            f"; {self.rebuilt} zlib shard(s) rebuilt, chunks re-wrapped as gzip with their "
            "DEFLATE data unchanged"
            if self.rebuilt
            else ""
        )
        return (
            f"{verb} {len(self.arrays)} array(s) and {len(self.groups)} group(s) {where}: "
            f"{self.shards:,} shard(s), {format_nbytes(self.nbytes)}, payload unchanged{rebuilt}"
        )


@shares_parameters(STORED_PARAMETERS)
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
        Shards copied at the same time (threads of this process, with or
        without a Dask cluster).
    progress : bool
        Show a ``tqdm.auto`` bar over the bytes of the shards copied.

    Returns
    -------
    MigrateReport

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        When the source holds no draft hierarchy, an array uses something
        Zarr v3 cannot express (:class:`~shardpipe.errors.UnsupportedLegacyError`),
        or the target is not empty. Nothing is written.
    shardpipe.errors.ShardFormatError
        When a shard's index is broken. Nothing is written.
    """
    add_crc32c = check_bool("add_crc32c", add_crc32c)
    zlib_as_gzip = check_bool("zlib_as_gzip", zlib_as_gzip)
    dry_run = check_bool("dry_run", dry_run)
    workers = check_int("workers", workers, example=8)
    progress = check_bool("progress", progress)
    if target is None and target_storage_options is not None:
        raise InvalidArgumentError(
            "target_storage_options",
            "given without a target (an in-place migration uses storage_options)",
            "Pass a target, or leave target_storage_options out",
        )
    src = _resolve("source", source, {"storage_options": "storage_options"}, storage_options)
    in_place = target is None
    if in_place:
        dst = src
    else:
        options = "storage_options" if target_storage_options is None else "target_storage_options"
        dst = _resolve(
            "target",
            target,
            {"storage_options": options},
            storage_options if target_storage_options is None else target_storage_options,
        )
        check_reads_apart(
            dst,
            [src],
            parameter="target",
            fix="Give a target outside the source hierarchy, or leave target out to migrate "
            "in place",
        )
    parameter, given = ("source", source) if in_place else ("target", target)
    entry = read_json(src.shards, src.key("zarr.json"))
    if not is_draft_entry_point(entry):
        if in_place and (finished := _finished(src, source, entry, dry_run)) is not None:
            return finished
        raise InvalidArgumentError(
            "source",
            f"{source!r} holds no hierarchy of the sharding storage-transformer draft (its "
            "zarr.json is missing or is not the draft's entry point)",
            "Pass the folder or URL whose zarr.json names "
            "https://purl.org/zarr/spec/protocol/core/3.0",
        )
    earlier = trusted_marker(dst, parameter, given, _name(source), in_place)
    plan = plan_migration(src, add_crc32c, zlib_as_gzip)
    if in_place:
        refuse_clashes(plan)
        refuse_strays(src, plan)
    refuse_occupied(dst, target, plan, earlier)
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
    job = MigrationJob(src, dst, plan, report, earlier, _name(source), add_crc32c, workers)
    migrated: MigrateReport = run_checked_job(job, RunOptions(progress))
    return migrated


@dataclass
class MigrationJob:
    """A planned migration of a draft hierarchy: one pass of the runner, no array writes.

    The pass writes the marker (clearing what an interrupted run left), copies
    every shard on ``workers`` threads, writes the v3 documents (the root's
    last), deletes the draft when in place, and drops the marker.
    """

    source: ResolvedStore
    target: ResolvedStore
    plan: MigrationPlan
    report: MigrateReport
    earlier: MigrationMarker | None
    name: str
    add_crc32c: bool
    workers: int

    def summary_rows(self) -> list[tuple[str, str]]:
        """The plan as ``(label, value)`` rows (the report of a dry run)."""
        return [(label, value) for label, value in self.report._summary().rows]

    def passes(self) -> list[Pass]:
        """One pass: the whole migration (see the class)."""
        return [Pass("migrate", self._run)]

    def finish(
        self, reports: PassReports, seconds: float, snapshot_id: str | None
    ) -> MigrateReport:
        """The migration's report."""
        return self.report

    def _run(self, progress: bool) -> list[Any]:
        src, dst, plan = self.source, self.target, self.plan
        in_place = self.report.in_place
        _start(dst, MigrationMarker(self.name, in_place), plan, self.earlier)
        with ThreadPoolExecutor(self.workers) as pool:
            copies = pool.map(
                lambda shard: copy_shard(src, dst, shard, self.add_crc32c, MIGRATION_STAGING),
                plan.shards,
            )
            try:
                _follow(copies, plan.shards, progress)
            except BaseException:
                pool.shutdown(cancel_futures=True)  # the copies not started yet
                raise
        for key, document in plan.documents().items():  # the root's last
            dst.shards.put(dst.key(key), [json.dumps(document, indent=2).encode()])
        if in_place:
            _delete_draft(src)
        drop_marker(dst)
        return []


def _resolve(
    parameter: str, given: Any, renames: dict[str, str], options: dict[str, Any] | None
) -> ResolvedStore:
    """``resolve_store`` of ``given``, its errors naming ``parameter``; a file is refused.

    ``renames`` maps a parameter ``resolve_store`` names to the one of
    :func:`migrate` that was given (``storage_options`` of the target may
    be ``target_storage_options``).
    """
    try:
        resolved = resolve_store(given, None, options)
    except InvalidArgumentError as err:
        name = renames.get(err.parameter, parameter)
        raise InvalidArgumentError(name, err.problem, err.fix) from None
    shards = resolved.shards
    while isinstance(shards, DelegatingStore):  # the retry layer, a fault injector ...
        shards = shards.inner
    if isinstance(shards, LocalShardStore):
        path = shards.root
        while not os.path.lexists(path) and os.path.dirname(path) != path:
            path = os.path.dirname(path)
        if not os.path.isdir(path):
            raise InvalidArgumentError(
                parameter,
                f"{given!r} is not a folder ({path} is a file)",
                "Pass the folder of the hierarchy"
                if parameter == "source"
                else "Pass an empty folder or one that does not exist yet",
            )
    return resolved


def _finished(
    src: ResolvedStore, source: Any, entry: dict[str, Any] | None, dry_run: bool
) -> MigrateReport | None:
    """The report of an in-place migration finished earlier, None if ``src`` holds none.

    Finished earlier: the marker of an in-place migration of this source
    is there (the draft's leftovers are deleted, then the marker), or no
    marker is and ``src`` holds a Zarr v3 hierarchy and no draft document
    (a migration killed in its last instant, or finished: nothing to do).
    """
    marker = read_marker(src)  # a malformed one is refused, whoever it names
    if marker is not None:
        if marker.source != _name(source) or not marker.in_place:
            return None  # another migration's: nothing of ours to finish
    else:
        v3 = isinstance(entry, dict) and entry.get("zarr_format") == 3
        if not v3 or next(iter(src.shards.list(src.key("meta/root"))), None) is not None:
            return None
    leftovers = _delete_draft(src, dry_run=dry_run) + drop_marker(src, dry_run=dry_run)
    return MigrateReport(dry_run=dry_run, finished_earlier=True, leftovers=leftovers)


def _name(source: Any) -> str:
    """How the marker names a source: a URL as given, a local path made absolute."""
    text = os.fspath(source) if isinstance(source, os.PathLike) else str(source)
    return text.rstrip("/") if "://" in text else os.path.abspath(text)


def _start(
    dst: ResolvedStore, run: MigrationMarker, plan: MigrationPlan, earlier: MigrationMarker | None
) -> None:
    """Write the marker; after an interrupted run, clear what it left that this one won't write.

    The marker holds ``run`` (the source and whether in place) and lists
    every document and array of this run and of the interrupted one, before
    anything is deleted: a run killed while clearing is cleared by the next.
    ``earlier`` is a marker :func:`~shardpipe.legacy.marker.trusted_marker`
    accepted.
    """
    old_documents = list(earlier.documents) if earlier else []
    marker = MigrationMarker(
        run.source,
        run.in_place,
        tuple(sorted(set(plan.documents()) | set(old_documents))),
        tuple(sorted(set(plan.array_paths()) | set(earlier.arrays if earlier else ()))),
    )
    write_marker(dst, marker)
    if earlier is not None:
        _clear_leftovers(dst, plan, list(marker.arrays), old_documents)


def _clear_leftovers(
    dst: ResolvedStore, plan: MigrationPlan, arrays: list[str], documents: list[str]
) -> None:
    """Abort open uploads; delete the shards of ``arrays`` and the ``documents`` not planned."""
    for array in arrays:  # open uploads aborted, temporary files removed
        dst.shards.cleanup(dst.key(MIGRATION_STAGING), dst.key(f"{array}/c" if array else "c"))
    planned = {dst.key(shard.v3_key) for shard in plan.shards}
    for array in arrays:
        stale = [key for key in shard_keys(dst, array) if key not in planned]
        for key in stale:
            dst.shards.delete(key)
        if stale and array:
            dst.shards.prune(dst.key(f"{array}/c"))
    for key in set(documents) - set(plan.documents()):
        dst.shards.delete(dst.key(key))
        dst.shards.prune(dst.key(key.rpartition("/")[0]))


def _follow(copies: Iterator[None], shards: list[DraftShard], progress: bool) -> None:
    """Wait for every copy (in order), a bar counting their bytes with ``progress``."""
    total = sum(s.size for s in shards)
    with bar_class()(
        total=total, unit="B", unit_scale=True, desc="migrate", disable=not progress
    ) as bar:
        for shard, _ in zip(shards, copies, strict=True):
            if bar.n + shard.size >= total:
                bar.n += shard.size  # the last: drawn once, on closing
            else:
                bar.update(shard.size)


def _delete_draft(src: ResolvedStore, *, dry_run: bool = False) -> int:
    """Delete every key of the draft (``meta/root*``, ``data/root/``); return how many.

    With ``dry_run`` only count them.
    """
    deleted = 0
    for prefix, folder in (("meta/root", "meta/"), ("data/root/", "data/")):
        keys = list(src.shards.list(src.key(prefix)))
        deleted += len(keys)
        if dry_run:
            continue
        for key in keys:
            src.shards.delete(key)
        src.shards.prune(src.key(folder))
    return deleted
