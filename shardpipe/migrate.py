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

1. Every draft document is read and translated, and every shard's index
   read, before anything is written: what v3 cannot express, or a shard
   whose index is broken, stops the migration with nothing written.
2. A marker (``.shardpipe/migrate.json``) is written at the target.
3. Every shard is copied to its new key, each copy atomic: inside one store
   without passing through this process (a hard link on a local disk, a
   file copy with ``add_crc32c``; S3 ``UploadPartCopy`` for shards of at
   least 5 MiB); to another store in parts of at most 8 MiB (a multipart
   upload on S3), one part in memory per copy.
4. The ``zarr.json`` of every array and group but the root is written,
   then the root's last, replacing the draft's entry point when migrating
   in place. Until this step the source is untouched and the old tool
   reads it as before; from it on, zarr-python 3 and tensorstore read the
   migrated hierarchy.
5. In place only: the draft's keys (``meta/``, ``data/``) are deleted.
6. The marker is deleted.

Running ``migrate`` again after an interruption finishes the job: before
step 4 it starts over (the copies are repeated, the same bytes); after it,
it only deletes what is left of the draft (step 5) and the marker.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import crc32c
import numpy as np

from shardpipe.checks import check_bool, check_int
from shardpipe.core.grid import Coords
from shardpipe.errors import InvalidArgumentError, ShardFormatError
from shardpipe.formats.base import assemble_shard, read_checked_index
from shardpipe.formats.zarr_sharding import CHECKSUM_NBYTES, ZarrShardingFormat
from shardpipe.legacy_hierarchy import read_draft, read_json, shard_target
from shardpipe.legacy_metadata import LegacyArray, is_draft_entry_point
from shardpipe.storage.resolve import ResolvedStore, resolve_store
from shardpipe.zlib_rewrap import zlib_to_gzip

MARKER = ".shardpipe/migrate.json"
STAGING = ".shardpipe/migrate-staging"
COPY_PIECE = 4 << 30
"""Most bytes of one server-side copied part (S3 allows 5 GiB)."""
STREAM_PIECE = 8 << 20
"""Most bytes of one part when a shard is copied through this process (S3's least is 5 MiB)."""


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
            return "the v3 hierarchy was already written; the draft's leftovers were deleted"
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


@dataclass(frozen=True)
class _Shard:
    """One draft shard to copy."""

    array: LegacyArray
    key: str
    coords: Coords
    size: int


@dataclass
class _Plan:
    arrays: list[LegacyArray]
    groups: dict[str, dict[str, Any]]
    shards: list[_Shard]


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
    src = resolve_store(source, None, storage_options)
    if target is None and target_storage_options is not None:
        raise InvalidArgumentError(
            "target_storage_options",
            "given without a target (an in-place migration uses storage_options)",
            "Pass a target, or leave target_storage_options out",
        )
    if target_storage_options is None:
        target_storage_options = storage_options
    dst = src if target is None else resolve_store(target, None, target_storage_options)
    in_place = target is None
    entry = read_json(src.shards, src.key("zarr.json"))
    if not is_draft_entry_point(entry):
        if in_place and src.shards.size(src.key(MARKER)) is not None and entry is not None:
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
    if in_place:
        _refuse_clashes(plan)
        _refuse_strays(src, plan)
    else:
        _refuse_occupied(dst, target)
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
    dst.shards.put(dst.key(MARKER), [json.dumps({"source": str(source)}).encode()])
    with ThreadPoolExecutor(workers) as pool:
        copies = pool.map(lambda shard: _copy(src, dst, shard, add_crc32c), plan.shards)
        _follow(copies, plan.shards, progress)
    documents = {a.path: a.document for a in plan.arrays} | plan.groups
    for path in sorted(documents, key=lambda p: (p == "", p)):  # the root's last
        key = dst.key(f"{path}/zarr.json" if path else "zarr.json")
        dst.shards.put(key, [json.dumps(documents[path], indent=2).encode()])
    dst.shards.discard_staging(dst.key(STAGING))
    if in_place:
        _delete_draft(src)
    _drop_marker(dst)
    return report


def _follow(copies: Iterator[None], shards: list[_Shard], progress: bool) -> None:
    """Wait for every copy (in order), a bar counting their bytes with ``progress``."""
    from tqdm.auto import tqdm

    total = sum(s.size for s in shards)
    with tqdm(total=total, unit="B", unit_scale=True, desc="migrate", disable=not progress) as bar:
        for shard, _ in zip(shards, copies, strict=True):
            bar.update(shard.size)


def _drop_marker(dst: ResolvedStore) -> None:
    dst.shards.delete(dst.key(MARKER))
    dst.shards.prune(dst.key(".shardpipe/"))


def _plan(src: ResolvedStore, add_crc32c: bool, zlib_as_gzip: bool) -> _Plan:
    """Translate every node and read every shard's index (nothing written)."""
    draft = read_draft(src, add_crc32c=add_crc32c, zlib_as_gzip=zlib_as_gzip, strict=True)
    assert draft is not None  # the entry point was read just now
    shards = [shard for array in draft.arrays for shard in _shards(src, array)]
    return _Plan(draft.arrays, draft.groups, shards)


def _shards(src: ResolvedStore, array: LegacyArray) -> Iterator[_Shard]:
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
        yield _Shard(array, key, coords, size)


def _refuse_clashes(plan: _Plan) -> None:
    """In place, a node named ``meta`` or ``data`` at the top would be deleted with the draft."""
    for path in [a.path for a in plan.arrays] + list(plan.groups):
        if path.split("/")[0] in ("meta", "data"):
            raise InvalidArgumentError(
                "target",
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


def _refuse_occupied(dst: ResolvedStore, target: Any) -> None:
    """A target must be empty, or hold the marker of an interrupted migration."""
    if dst.shards.size(dst.key(MARKER)) is not None:
        return
    for key in dst.shards.list(dst.key("")):
        raise InvalidArgumentError(
            "target",
            f"{target!r} is not empty (it holds {key!r})",
            "Pass an empty folder or URL, or leave target out to migrate in place",
        )


def _copy(src: ResolvedStore, dst: ResolvedStore, shard: _Shard, add_crc32c: bool) -> None:
    """Copy one shard byte for byte to its v3 key (plus its index's CRC32C)."""
    array = shard.array
    new = array.v3_key(shard.coords)
    key = dst.key(f"{array.path}/{new}" if array.path else new)
    if array.zlib_to_gzip:
        _rewrap(src, dst, shard, key, add_crc32c)
        return
    tail = b""
    if add_crc32c:
        index = src.shards.get_range(shard.key, shard.size - 16 * array.n_slots, shard.size)
        tail = crc32c.crc32c(index).to_bytes(CHECKSUM_NBYTES, "little")
    store = dst.shards
    if src.shards is store and store.abilities.hard_links and not tail:  # no byte copied
        store.link(shard.key, key)
    elif src.shards is store and store.abilities.copy_range and shard.size >= store.min_part_size:
        bounds = _bounds(shard.size, COPY_PIECE, store.min_part_size)  # not through here
        handle = store.begin_parts(key, dst.key(STAGING))
        receipts = [
            store.copy_part(handle, n, shard.key, a, b)
            for n, (a, b) in enumerate(itertools.pairwise(bounds))
        ]
        store.finish_parts(handle, receipts, b"", tail)
    elif store.supports_parts and shard.size > STREAM_PIECE:  # one piece in memory at a time
        bounds = _bounds(shard.size, STREAM_PIECE, store.min_part_size)
        handle = store.begin_parts(key, dst.key(STAGING))
        receipts = [
            store.write_part(handle, n, [src.shards.get_range(shard.key, a, b)])
            for n, (a, b) in enumerate(itertools.pairwise(bounds))
        ]
        store.finish_parts(handle, receipts, b"", tail)
    else:
        data = src.shards.get(shard.key)
        if data is None:
            raise FileNotFoundError(shard.key)
        store.put(key, [data, tail])


def _bounds(size: int, most: int, least: int) -> list[int]:
    """Edges of equal pieces of ``size`` bytes: at most ``most`` bytes, at least ``least``.

    ``least`` (the store's smallest part) wins: a shard too small to be cut
    is one piece.
    """
    n = max(1, min(-(-size // most), size // max(least, 1)))
    return [size * k // n for k in range(n + 1)]


def _rewrap(src: ResolvedStore, dst: ResolvedStore, shard: _Shard, key: str, crc: bool) -> None:
    """Rebuild a zlib shard with its chunks re-wrapped as gzip members, in stored order."""
    data = src.shards.get(shard.key)
    if data is None:
        raise FileNotFoundError(shard.key)
    legacy = shard.array.shard_format
    index, _ = read_checked_index(
        legacy, lambda a, b: data[a:b], len(data), shard.key, shard=shard.coords
    )
    slots = np.flatnonzero(index.stored())
    slots = slots[np.argsort(index.entries[slots, 0], kind="stable")]
    encoded = []
    for slot in slots.tolist():
        start, nbytes = (int(v) for v in index.entries[slot])
        try:
            encoded.append((slot, zlib_to_gzip(data[start : start + nbytes])))
        except ShardFormatError as err:
            raise ShardFormatError(f"shard {shard.key!r}, slot {slot}: {err}") from err
    v3 = ZarrShardingFormat(legacy.chunks_per_shard, "end", checksum=crc)
    dst.shards.put(key, assemble_shard(v3, encoded, shard=shard.coords))


def _delete_draft(src: ResolvedStore) -> None:
    """Delete every key of the draft (``meta/`` and ``data/``)."""
    for prefix in ("meta/", "data/"):
        for key in list(src.shards.list(src.key(prefix))):
            src.shards.delete(key)
        src.shards.prune(src.key(prefix))
