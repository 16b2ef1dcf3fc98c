"""Keys at the storage edge: the names shardpipe reserves, and the check every backend makes.

Every key that shardpipe itself writes beside an array's data is named
here, once (no other module of the package spells them; a test checks it):

* :data:`JOB_DIR` (``.shardpipe/``) beside an array's ``zarr.json`` holds
  the job marker, claims, undo records, job records and staging areas (see
  :mod:`shardpipe.journal`)::

      <array>/.shardpipe/job.json                  JOB_MARKER: the job holding the array
      <array>/.shardpipe/claims/<sha1 of job id>    CLAIMS_DIR: a claim on a stale marker
      <array>/.shardpipe/undo/<job>/<sha1 of key>   UNDO_DIR: one undo record per shard changed
      <array>/.shardpipe/done/<update>/<sha1>       DONE_DIR: shards an update has finished
      <array>/.shardpipe/staging/<token>/...        STAGING_DIR: parts of shards written in parts
      <array>/.shardpipe/write.json                 WRITE_RECORD: what resume=True carries on
      <target>/.shardpipe/intermediate.json         INTERMEDIATE_RECORD: a two-pass rechunk's copy
      <group>/.shardpipe/ome-write.json             OME_GROUP_RECORD: an OME-Zarr write under way
      <volume>/.shardpipe/precomputed-write.json    PRECOMPUTED_UNFINISHED: a precomputed write
      <root>/.shardpipe/migrate.json                MIGRATION_MARKER: a migration under way
      <root>/.shardpipe/migrate-staging/...         MIGRATION_STAGING: its staging data

* :data:`TEMPORARY_SUFFIX` (``.shardpipe-tmp``) ends the names of the
  temporary files a file-system backend writes beside a key before it
  renames them.

Backends call :func:`edge_key` on every key they are given (the pure check
is :func:`shardpipe.core.keys.checked_key`).
"""

from __future__ import annotations

from shardpipe.core.keys import key_problem
from shardpipe.errors import UnsafeKeyError

JOB_DIR = ".shardpipe"
"""Folder (key prefix) beside an array's ``zarr.json`` for shardpipe's own records."""

JOB_MARKER = f"{JOB_DIR}/job.json"
"""Key, relative to an array, of the marker of the job holding it."""

CLAIMS_DIR = f"{JOB_DIR}/claims"
"""Key prefix, relative to an array, of the claims on stale markers."""

UNDO_DIR = f"{JOB_DIR}/undo"
"""Key prefix, relative to an array, of the undo records of an update."""

DONE_DIR = f"{JOB_DIR}/done"
"""Key prefix, relative to an array, of the records of shards an update has finished."""

STAGING_DIR = f"{JOB_DIR}/staging"
"""Key prefix, relative to an array, of the staging areas of writes in parts."""

NO_STAGING = "none"
"""A staging area no write uses: cleaning it up removes only temporary files."""

WRITE_RECORD = f"{JOB_DIR}/write.json"
"""Key, relative to an array, of the record of a write that ``resume=True`` carries on."""

MIGRATION_MARKER = f"{JOB_DIR}/migrate.json"
"""Key, relative to a hierarchy's root, of the marker of a migration under way."""

MIGRATION_STAGING = f"{JOB_DIR}/migrate-staging"
"""Key prefix, relative to a hierarchy's root, of a migration's staging data."""

PRECOMPUTED_UNFINISHED = f"{JOB_DIR}/precomputed-write.json"
"""Key, relative to a precomputed volume, of the marker of a write not yet finished."""

MIGRATION_TEMPORARY = f"{JOB_DIR}/.migrate.json."
"""Start of the keys of the migration marker's temporary files (a kill while it was written)."""

OME_GROUP_RECORD = f"{JOB_DIR}/ome-write.json"
"""Key, relative to an OME-Zarr image group, of the record of a write under way."""

INTERMEDIATE_RECORD = f"{JOB_DIR}/intermediate.json"
"""Key, relative to a rechunk's target, of the record of its intermediate copy (two passes)."""

TEMPORARY_SUFFIX = ".shardpipe-tmp"
"""End of the names of the temporary files a ``put`` writes beside its key."""


def edge_key(key: str, store: object, *, prefix: bool = False) -> str:
    """Return ``key`` if it stays inside ``store``, else raise: a backend's own check.

    :func:`~shardpipe.core.keys.checked_key` with the backend as the origin (described only when
    the key is refused, so the check costs a few string operations).

    Parameters
    ----------
    key : str
        The key (or, with ``prefix=True``, key prefix) a backend was given.
    store : object
        The backend, named in the error.
    prefix : bool
        Accept ``""`` and a trailing ``/``.

    Returns
    -------
    str
        ``key``, unchanged.

    Raises
    ------
    shardpipe.errors.UnsafeKeyError
        Naming the key, the backend and what is wrong with the key.
    """
    problem = key_problem(key, prefix=prefix)
    if problem is not None:
        raise UnsafeKeyError(str(key), f"a call to {store!r}", problem)
    return key
