"""After a failed write job: say what is left, roll back shards left mid-update.

Shared by the runs on a scheduler (:mod:`shardpipe.write.run`) and in the
calling thread (:mod:`shardpipe.write.in_thread`).
"""

from __future__ import annotations

from typing import Any

from shardpipe import advice
from shardpipe.journal.markers import JobKeys, JobMarker
from shardpipe.journal.undo import recover
from shardpipe.storage.resolve import ResolvedStore


def undo_failed(
    target: ResolvedStore,
    keys: JobKeys,
    err: BaseException,
    marker: JobMarker,
    *,
    identity: dict[str, Any] | None,
    grown_from: tuple[int, ...] | None = None,
) -> None:
    """After a failed run: roll back shards left mid-update, remove staging data.

    Runs while the job still holds the array (``marker``): no other job
    writes it meanwhile. Say what is left and what to do, once per error
    (jobs run together share it). ``identity``: the job record of a new
    array's write (it can be resumed), None for an update. ``grown_from``:
    for an append, the shape the array keeps.
    """
    if target.transactional:
        what_now: str | None = (
            "shardpipe: the write did not finish; none of its shards reached the Icechunk "
            "session (the metadata it wrote did: session.discard_changes() drops it)"
        )
    elif identity is not None:
        what_now = (
            "shardpipe: the write did not finish; the shards it published are complete "
            f"and kept. Run the same write with {advice.setting('resume')} to write only the rest"
        )
    else:
        what_now = None
    if grown_from is not None:
        what_now = (
            f"shardpipe: the append did not finish: the array keeps its shape {grown_from}; "
            "shards it wrote past that shape are not read (verify lists them) until the "
            f"same append is run again with {advice.setting('resume')}, which keeps them"
        )
    if what_now is not None and what_now not in getattr(err, "__notes__", ()):
        err.add_note(what_now)
    try:
        rolled = recover(target.shards, keys, marker)
        if rolled:
            named = ", ".join(map(repr, rolled[:8])) + (" ..." if len(rolled) > 8 else "")
            err.add_note(
                f"shardpipe: {len(rolled)} shard(s) left mid-update were rolled back "
                f"to their old bytes: {named}"
            )
    except Exception as cleanup_err:
        err.add_note(
            f"shardpipe: undoing the failed write failed too ({cleanup_err!r}); "
            f"run `shardpipe repair` on the array"
        )
