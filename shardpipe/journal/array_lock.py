"""Holding an array: one job at a time, and a dead job's marker taken over in one step.

A job holds an array while its marker (:data:`~shardpipe.storage.keys.JOB_MARKER`, see
:mod:`shardpipe.journal.undo`) names it. :func:`take` creates the marker
create-only; when another job's marker is there and that job no longer runs
(or ``force`` says to ignore it), :func:`take` replaces the marker with its
own, and only then, holding the array, recovers what the dead job left
(:func:`shardpipe.journal.undo.recover`). Recovering first and taking the array
after would let a job that stalled in between roll back the undo records of
a live job that took the array meanwhile: its updates would be lost.

The replacement must succeed for exactly one of the jobs that found the
same stale marker, so it is one atomic step on every backend:

* where the backend enforces replace-if-unchanged (S3 ``If-Match``), it is
  one conditional put against the version of the stale marker as read;
* elsewhere (a file system, zarr stores, Icechunk sessions, whose
  create-only writes are atomic but whose replaces are not), the job first creates,
  create-only, a *claim* named after the stale job (under
  :data:`~shardpipe.storage.keys.CLAIMS_DIR`, named by the sha1 of its id, holding the
  claimant's own marker). Only one job can create it. The claimant then checks that the
  marker still names the stale job and puts its own in its place, then drops the claim.
  A marker naming a job is replaced only by that job or by the holder of the claim on
  it, and job ids are never reused, so once replaced the stale marker never comes back:
  a job that claims it later finds another marker and looks again.
* A claimant that died holding its claim is itself a stale holder, of the
  claim: the next job takes the claim over the same way, one level down.

On a store whose create-only writes are not atomic (``create_only`` False:
a zarr ``FsspecStore``) two jobs may still both believe they won; such
stores leave that window open for every conditional write.

:func:`release` removes the marker if it is still the job's, and the empty
folders its records left. :mod:`shardpipe.journal.stalls` lets tests stall
a job at every step named here.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

from shardpipe.errors import ConditionFailedError, JobConflictError
from shardpipe.journal.markers import (
    JobKeys,
    JobMarker,
    conflict,
    ended,
    read_marker,
    read_marker_at,
    started,
)
from shardpipe.journal.stalls import step
from shardpipe.journal.undo import recover
from shardpipe.storage.base import ObjectVersion, ShardStore

TRIES = 8
"""Times a job looks again after another job changed the marker under it."""

DEEPEST_CLAIM = 8
"""Most dead claimants, one claiming the other's claim, a takeover goes through."""


@dataclass(frozen=True)
class Taken:
    """What :func:`take` did.

    Attributes
    ----------
    marker : JobMarker
        The job's marker, now holding the array.
    replaced : JobMarker or None
        The marker of the job that no longer ran (or was forced out), if
        there was one.
    rolled_back : int
        Shards rolled back from the undo records found.
    """

    marker: JobMarker
    replaced: JobMarker | None
    rolled_back: int


def take(store: ShardStore, keys: JobKeys, action: str, *, force: bool = False) -> Taken:
    """Hold the array for a new job doing ``action``; recover what earlier jobs left.

    Parameters
    ----------
    store : ShardStore
        Where the array is.
    keys : JobKeys
        The array's record keys.
    action : str
        What the job does (named in other jobs' errors).
    force : bool
        Take the array over from a job that may still run (``repair --force``:
        the user knows it stopped).

    Raises
    ------
    JobConflictError
        If another job that may still run holds the array, or is taking it over.
    """
    marker = JobMarker.new(action)
    started(marker.job)  # before the marker exists: no thread here may think it stale
    try:
        replaced = _create_or_take_over(store, keys, marker, action, force)
    except BaseException:
        ended(marker.job)
        raise
    try:
        step("acquire.recover")
        # a marker this job just created itself is its own: not read back
        fresh = replaced is None and store.abilities.create_only
        rolled = recover(store, keys, marker, leftovers=replaced is not None, checked=fresh)
    except BaseException:
        release(store, keys, marker)
        raise
    return Taken(marker, replaced, len(rolled))


def acquire(store: ShardStore, keys: JobKeys, action: str, *, force: bool = False) -> JobMarker:
    """Hold the array for a new job; return its marker (see :func:`take`)."""
    return take(store, keys, action, force=force).marker


def release(
    store: ShardStore,
    keys: JobKeys,
    marker: JobMarker,
    *,
    meanwhile: Callable[[], None] | None = None,
) -> None:
    """Remove the job's marker (if it is still the job's) and its empty record folders.

    ``meanwhile`` is the job's last work under the marker (its record marked
    complete), done in this thread while the marker is read in another: a
    round trip fewer on an object store. The marker is removed only once that
    work ended, whether it succeeded or not (as after any failure of the
    job); its error is raised then.
    """
    try:
        step("release.read")
        current, failure = _read_marker_during(store, keys, meanwhile)
        if current is not None and current.job == marker.job:
            step("release.prune")  # still held: no other job writes records meanwhile
            store.prune(keys.undo)
            store.prune(keys.claims)
            step("release.delete")
            store.delete(keys.marker)
        if failure is not None:
            raise failure
    finally:
        ended(marker.job)


def _read_marker_during(
    store: ShardStore, keys: JobKeys, work: Callable[[], None] | None
) -> tuple[JobMarker | None, BaseException | None]:
    """The array's marker, read while ``work`` runs here; and ``work``'s error, if it failed.

    The read runs in a daemon thread, so that an interrupt while waiting for
    it is not held up by a read that retries. When both fail, ``work``'s
    error is raised with a note of the read's (the marker is not let go).
    """
    if work is None:
        return read_marker(store, keys), None
    read: dict[str, Any] = {}

    def read_it() -> None:
        try:
            read["marker"] = read_marker(store, keys)
        except BaseException as err:
            read["error"] = err

    reader = threading.Thread(target=read_it, name="shardpipe-release", daemon=True)
    reader.start()
    failure: BaseException | None = None
    try:
        work()
    except BaseException as err:  # the marker is let go first, then it is raised
        failure = err
    reader.join()
    if "error" in read:
        if failure is None:
            raise read["error"]
        failure.add_note(
            f"shardpipe: the job's marker could not be read to let go: {read['error']}"
        )
        raise failure
    return read["marker"], failure


@contextlib.contextmanager
def holding(
    store: ShardStore, keys: JobKeys, action: str, *, force: bool = False
) -> Iterator[JobMarker]:
    """Hold the array for the duration of a ``with`` block (see :func:`take`)."""
    marker = acquire(store, keys, action, force=force)
    try:
        yield marker
    finally:
        release(store, keys, marker)


def _create(store: ShardStore, key: str, marker: JobMarker) -> bool:
    """Create ``key`` holding ``marker`` if nothing is there; return whether it was created."""
    try:
        if not store.abilities.create_only and store.get(key) is not None:
            return False
        store.put(key, [marker.encode()], if_absent=True)
    except ConditionFailedError:
        return False
    return True


def _create_or_take_over(
    store: ShardStore, keys: JobKeys, marker: JobMarker, action: str, force: bool
) -> JobMarker | None:
    """Put ``marker`` at the marker's key; return the stale marker replaced, if any."""
    for _ in range(TRIES):
        step("acquire.create")
        if _create(store, keys.marker, marker):
            return None
        step("acquire.read")
        seen = read_marker_at(store, keys.marker)
        if seen is None:
            continue  # it just went away
        other, version = seen
        if not (force or other.is_stale()):
            raise conflict(other, keys, action)
        if _take_over(store, keys, keys.marker, (other, version), marker, action, force):
            return other
    current = read_marker(store, keys)
    raise conflict(current or marker, keys, action)


def _take_over(
    store: ShardStore,
    keys: JobKeys,
    key: str,
    seen: tuple[JobMarker, ObjectVersion],
    marker: JobMarker,
    action: str,
    force: bool,
    depth: int = 0,
) -> bool:
    """Replace the stale marker (or claim) ``seen`` at ``key`` with ``marker``, atomically.

    Returns whether this job won; False when another job changed ``key``
    first (the caller looks again).
    """
    stale, version = seen
    if store.abilities.replace_if_unchanged:
        step("acquire.replace")
        try:
            store.put(key, [marker.encode()], if_version=version)
        except ConditionFailedError:
            return False
        return True
    claim = keys.claim_key(stale.job)
    step("acquire.claim")
    if not _create(store, claim, marker) and not _take_over_claim(
        store, keys, claim, stale, marker, action, force, depth
    ):
        return False
    try:
        step("acquire.check")
        current = read_marker_at(store, key)
        if current is None or current[0].job != stale.job:
            return False  # replaced (or released) since it was read: look again
        step("acquire.replace")
        store.put(key, [marker.encode()], if_version=current[1])
        return True
    except ConditionFailedError:
        return False
    finally:
        step("acquire.unclaim")
        store.delete(claim)  # the stale marker is gone for good, or was never ours to take


def _take_over_claim(
    store: ShardStore,
    keys: JobKeys,
    claim: str,
    stale: JobMarker,
    marker: JobMarker,
    action: str,
    force: bool,
    depth: int,
) -> bool:
    """Another job claimed ``stale``'s marker first: give way, or take its claim over if it died."""
    seen = read_marker_at(store, claim)
    if seen is None:
        return False  # its claimant is done: look at the marker again
    claimant = seen[0]
    if not (force or claimant.is_stale()) or depth >= DEEPEST_CLAIM:
        raise JobConflictError(
            f"cannot {action}: {claimant.describe()} is taking this array over from "
            f"{stale.describe()}, which no longer runs (claim {claim!r}). Wait for it; if it "
            "no longer runs either, run `shardpipe repair <array> --force`",
            asdict(claimant),
        )
    return _take_over(store, keys, claim, seen, marker, action, force, depth + 1)
