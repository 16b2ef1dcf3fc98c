"""What unfinished jobs left beside an array, as ``verify`` reports it.

A write that was interrupted leaves some of these: its job record still
saying ``"running"`` (:mod:`shardpipe.write.resume`; ``verify`` lists the
job among the interrupted ones, :mod:`shardpipe.journal.unfinished`), a
record that cannot be read, objects in the staging area
(parts of shards that were being written in parts, markers of multipart
uploads), and its job marker (:mod:`shardpipe.journal.undo`). None of them makes
a shard wrong, so a plain ``verify`` lists them as notes; ``verify
--complete`` (``complete=True``) counts them as problems, because the array
is then not the whole of what was to be written.
"""

from __future__ import annotations

from shardpipe import advice
from shardpipe.errors import MetadataError
from shardpipe.journal.job_record import read_record
from shardpipe.journal.markers import JobKeys, read_marker
from shardpipe.journal.unfinished import JobFolder, job_folder
from shardpipe.storage.keys import JOB_MARKER, STAGING_DIR, WRITE_RECORD
from shardpipe.storage.resolve import ResolvedStore


def unfinished_work(
    target: ResolvedStore, folder: JobFolder | None = None
) -> list[tuple[str, str]]:
    """``(key, finding)`` for each trace of an unfinished job beside the array at ``target``.

    A job record that still says ``"running"`` is not among them: it is an
    interrupted job (:func:`~shardpipe.journal.unfinished.array_jobs`).
    Only the records ``folder`` (the job folder as the caller listed it, or
    as listed here) holds are read.
    """
    if folder is None:  # the caller's listing, or one made here: only what it holds is read
        folder = job_folder(target)
    keys = JobKeys(target.key(""))
    findings = []
    try:
        if folder.may_hold(WRITE_RECORD):
            read_record(target)
    except MetadataError as err:
        findings.append(
            (target.key(WRITE_RECORD), f"{err}; nothing shows which write made the array")
        )
    staging = list(target.shards.list(f"{keys.staging}/")) if folder.may_hold(STAGING_DIR) else []
    if staging:
        findings.append(
            (
                keys.staging,
                f"{len(staging)} object(s) of an unfinished write are in the staging area; "
                f"run `shardpipe cleanup` (or the same write with {advice.setting('resume')})",
            )
        )
    marker = read_marker(target.shards, keys) if folder.may_hold(JOB_MARKER) else None
    if marker is not None:
        state = (
            "no longer runs: run `shardpipe repair` on the array"
            if marker.is_stale()
            else "may still be running"
        )
        findings.append((keys.marker, f"{marker.describe()} holds the array and {state}"))
    return findings
