"""Every interrupted job whose record is at a location, whatever its kind.

Each kind of job keeps its own record of unfinished work (the formats stay
as earlier releases wrote them, so that their jobs still resume); each
record's own package reads it into an
:class:`~shardpipe.journal.unfinished.UnfinishedJob`. This is the one place
that asks all of them: ``maintenance`` is the lowest layer that sees the
array records (:mod:`shardpipe.journal`), the OME-Zarr group's
(:mod:`shardpipe.ome`), the precomputed volume's (:mod:`shardpipe.precomputed`),
the migration's (:mod:`shardpipe.legacy`) and the two-pass rechunk's
(:mod:`shardpipe.rechunking`). ``verify`` and ``info`` report what it finds
the same way (:func:`~shardpipe.journal.unfinished.unfinished_lines`).
"""

from __future__ import annotations

from collections.abc import Callable

from shardpipe.errors import MetadataError
from shardpipe.journal.unfinished import JobFolder, UnfinishedJob, array_jobs, job_folder
from shardpipe.legacy.marker import migration_job
from shardpipe.ome.group_checks import group_job
from shardpipe.precomputed.check import volume_job
from shardpipe.rechunking.copy_record import copy_job
from shardpipe.storage.keys import (
    INTERMEDIATE_RECORD,
    MIGRATION_MARKER,
    OME_GROUP_RECORD,
    PRECOMPUTED_UNFINISHED,
)
from shardpipe.storage.resolve import ResolvedStore

__all__ = ["only_records", "unfinished_jobs"]

_READERS: tuple[tuple[Callable[[ResolvedStore], UnfinishedJob | None], str], ...] = (
    (group_job, OME_GROUP_RECORD),
    (volume_job, PRECOMPUTED_UNFINISHED),
    (migration_job, MIGRATION_MARKER),
    (copy_job, INTERMEDIATE_RECORD),
)
"""The reader of each other kind of record, and the record's key (read only where it is)."""


_NODE_KEYS = ("zarr.json", ".zarray", ".zgroup", "info")
"""What makes a location an array, a group (v3, v2 or the draft's) or a precomputed volume."""


def only_records(target: ResolvedStore) -> list[UnfinishedJob]:
    """The interrupted jobs at a location that holds nothing else yet, or none.

    A job killed before it wrote the first metadata of what it makes (a
    write's record is saved just before the array's ``zarr.json``) leaves
    only its records: ``verify`` and ``info`` report those jobs there,
    instead of refusing the location as empty.
    """
    if any(target.shards.get(target.key(key)) is not None for key in _NODE_KEYS):
        return []
    return unfinished_jobs(target)


def unfinished_jobs(target: ResolvedStore, folder: JobFolder | None = None) -> list[UnfinishedJob]:
    """The interrupted jobs whose records are at ``target`` itself (not in arrays below it).

    In order: the array's write and update (:func:`~shardpipe.journal.unfinished.array_jobs`),
    an OME-Zarr image's write, update or conversion, a precomputed volume's
    write, a migration, a two-pass rechunk's copy. A record that cannot be
    read is left out here: ``verify`` reports it as a problem of its own.
    The job folder is listed once (``folder``: by the caller), and only the
    records it holds are read.
    """
    folder = job_folder(target) if folder is None else folder
    jobs = array_jobs(target, folder)
    for reader, key in _READERS:
        if not folder.may_hold(key):
            continue
        try:
            job = reader(target)
        except MetadataError:
            continue
        if job is not None:
            jobs.append(job)
    return jobs
