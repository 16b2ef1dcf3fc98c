"""Interrupted jobs, one type over every record of unfinished work.

Each kind of job keeps its own record of work under way, in its own format
(resuming reads it, and data written by earlier releases must still
resume): a write's job record, an update's records of finished shards and
undo records, an OME-Zarr group's record, a precomputed volume's marker, a
migration's marker, a two-pass rechunk's record of its copy (their keys are
in :mod:`shardpipe.storage.keys`). Whoever reads such a record describes an
interrupted job it shows as an :class:`UnfinishedJob`: its kind, what it was
writing, when it started (when the record says), and the call or command
that carries it on. ``verify`` and ``info`` list them the same way
(:func:`unfinished_lines`); :func:`shardpipe.maintenance.unfinished.unfinished_jobs`
gathers them at a location.

This module reads the records kept beside an array (:func:`array_jobs`); the
other kinds are read by their own packages.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from shardpipe import advice
from shardpipe.errors import MetadataError
from shardpipe.journal.job_record import read_record
from shardpipe.journal.markers import JobKeys, read_marker
from shardpipe.journal.undo import undo_records
from shardpipe.storage.keys import JOB_DIR, JOB_MARKER, UNDO_DIR, WRITE_RECORD
from shardpipe.storage.resolve import ResolvedStore

__all__ = [
    "JobFolder",
    "JobKind",
    "UnfinishedJob",
    "array_jobs",
    "job_folder",
    "same_call",
    "started_at",
    "unfinished_lines",
]


FOLDER_KEYS_LISTED = 1000
"""Most keys :func:`job_folder` lists (an object store's page); past it, every record is read."""


@dataclass(frozen=True)
class JobFolder:
    """What the job folder at a location holds, listed once.

    Every record of unfinished work, marker, staging area and temporary file
    of a job lies in that folder (:mod:`shardpipe.storage.keys`). The readers
    of each kind of record ask it first, and read only what is there: on an
    object store a request saved for each record that is not.

    Attributes
    ----------
    keys : frozenset of str or None
        The keys in the folder, relative to the location (they begin with
        :data:`~shardpipe.storage.keys.JOB_DIR`);
        None when there were more than :data:`FOLDER_KEYS_LISTED` (then every
        record may be there).
    """

    keys: frozenset[str] | None

    def may_hold(self, key: str) -> bool:
        """Whether ``key`` (relative to the location; a folder: keys under it) may be there."""
        if self.keys is None:
            return True
        return key in self.keys or any(k.startswith(f"{key}/") for k in self.keys)


EVERY_RECORD = JobFolder(None)
"""A folder not listed: every record may be there."""


def job_folder(target: ResolvedStore) -> JobFolder:
    """List the job folder at ``target`` (one request on an object store, while it is small)."""
    base = target.key("")
    listed = target.shards.list(target.key(f"{JOB_DIR}/"))
    keys = list(itertools.islice(listed, FOLDER_KEYS_LISTED + 1))
    if len(keys) > FOLDER_KEYS_LISTED:
        return EVERY_RECORD
    return JobFolder(frozenset(key[len(base) :] for key in keys))


JobKind = Literal["write", "update", "ome", "precomputed", "migration", "rechunk-copy"]
"""The kinds of interrupted job: a write of an array, an update of one (region write or
append), an OME-Zarr image's write, update or conversion, a Neuroglancer precomputed
volume's write, a migration of the sharding draft, the first pass of a two-pass rechunk."""


@dataclass(frozen=True)
class UnfinishedJob:
    """A job that started and did not finish, as the record it left shows.

    Attributes
    ----------
    kind : JobKind
        Which kind of job.
    key : str
        The key of the record that shows it.
    writing : str
        What the job was writing, in words (``"the array 'a'"``, ``"the
        OME-Zarr image"``).
    started : float or None
        Unix time the job started, when its record says.
    resume : str
        The call or command that carries the job on (or, where a job cannot
        be carried on, what settles it), in the caller's terms
        (:mod:`shardpipe.advice`).
    doing : str
        What the job did, in a word or two, where the kind does not say it
        (an OME-Zarr image's ``"conversion"``, ``"region write"``,
        ``"append"``); empty for the kind's own word.
    """

    kind: JobKind
    key: str
    writing: str
    started: float | None
    resume: str
    doing: str = ""

    def describe(self) -> str:
        """One line: the kind, what it was writing, since when, and how to carry it on.

        The record's key is not in it (:func:`unfinished_lines` puts it first).
        """
        when = ""
        if self.started is not None:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.started))
            when = f" (started {stamp})"
        doing = self.doing or _WORDS[self.kind]
        return f"an unfinished {doing} of {self.writing}{when}: {self.resume}"


_WORDS: dict[str, str] = {
    "write": "write",
    "update": "update",
    "ome": "write",
    "precomputed": "write",
    "migration": "migration",
    "rechunk-copy": "rechunk (its intermediate copy)",
}


def unfinished_lines(jobs: Sequence[UnfinishedJob]) -> list[str]:
    """The lines ``verify`` and ``info`` print for ``jobs`` (none when there are none)."""
    if not jobs:
        return []
    return [f"interrupted jobs: {len(jobs)}", *(f"  {job.key}: {job.describe()}" for job in jobs)]


def same_call(function: str, command: str) -> str:
    """The call that ran a job, in the caller's terms: ``the same shardpipe.rechunk call``
    in Python, ``the same `shardpipe rechunk` command`` on the command line."""
    if advice.for_command_line():
        return f"the same `shardpipe {command}` command"
    return f"the same shardpipe.{function} call"


def started_at(value: object) -> float | None:
    """``value`` if it is a plausible Unix time (a record's bytes are untrusted), else None."""
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < 2**35:
        return float(value)
    return None


def array_jobs(target: ResolvedStore, folder: JobFolder = EVERY_RECORD) -> list[UnfinishedJob]:
    """The interrupted write and update of the array at ``target``, as its records show.

    A write whose job record (:data:`~shardpipe.storage.keys.WRITE_RECORD`)
    does not say ``"complete"``; an update whose job marker is still there,
    or that left undo records (its records of finished shards stay after
    ``repair`` settles it, for a resume to skip them: they do not say that
    it is unfinished). A record that cannot be read is left to ``verify``'s
    own findings. The job marker, when there, says when the job started.
    Only the records ``folder`` may hold are read.
    """
    where = f"at {advice.place(target.path)}"
    keys = JobKeys(target.key(""))
    marker = None
    if folder.may_hold(JOB_MARKER):
        with contextlib.suppress(MetadataError):  # verify reports a broken marker itself
            marker = read_marker(target.shards, keys)
    started = None if marker is None else marker.started
    jobs = []
    try:
        record = read_record(target) if folder.may_hold(WRITE_RECORD) else None
    except MetadataError:
        record = None
    if record is not None and record["state"] != "complete":
        source = record.get("source")
        if isinstance(source, dict) and "rechunk" in source:
            again = f"run {same_call('rechunk', 'rechunk')} with {advice.setting('resume')}"
        else:
            again = _resume("write")
        jobs.append(
            UnfinishedJob("write", target.key(WRITE_RECORD), f"the array {where}", started, again)
        )
    undone = (
        next(iter(undo_records(target.shards, keys)), None) if folder.may_hold(UNDO_DIR) else None
    )
    updating = marker is not None and marker.action == "update"
    if undone is not None or updating:
        fix = _resume("region write or append")
        if undone is not None:
            fix += " (its shards left mid-change are rolled back first), or `shardpipe repair`"
        key = keys.marker if updating else keys.undo
        jobs.append(UnfinishedJob("update", key, f"the array {where}", started, fix))
    return jobs


def _resume(what: str) -> str:
    """How to carry on ``what``, a job that Python calls and some commands run alike.

    On the command line the job may have been a Python call (there is no plain
    ``write`` command), so both ways are named there.
    """
    if advice.for_command_line():
        return f"run the same {what} with resume=True (a Python call) or --resume (a command)"
    return f"run the same {what} with resume=True"
