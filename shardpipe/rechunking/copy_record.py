"""The record of a two-pass rechunk's intermediate copy, kept in the target's job folder.

A two-pass rechunk saves :data:`~shardpipe.storage.keys.INTERMEDIATE_RECORD` under its
target before the first byte of its copy is written, and deletes it once the copy is
gone:

* ``source``: what the copy is made from (the rechunk's source identity:
  location, shape, dtype, read unit);
* ``chunks``: the copy's chunks (what the plan made of the layout and
  ``max_mem``);
* ``store``: where the copy is (a path or URL; for a copy shardpipe placed,
  the hidden name beside the target that only this record remembers);
* ``placed``: whether shardpipe chose that place (no ``temp_store`` given);
* ``state``: ``"copying"`` while the first pass runs, ``"copied"`` once
  every block is stored.

A rerun of the same call with ``resume=True`` reads it
(:func:`read_copy_record`): a copy ``"copied"`` is used as it is (the first
pass is skipped), a copy ``"copying"`` keeps the blocks whose chunks are
all stored and copies the others. A record of another source or other
chunks is refused (:func:`check_same_copy`). The record survives an
``overwrite`` of the target's node (the job folder is kept), so a rerun
without ``resume`` finds it too, and deletes the copy it names when
shardpipe placed it (:func:`forget_copy`).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from shardpipe import advice
from shardpipe.errors import InvalidArgumentError, MetadataError
from shardpipe.journal.job_record import read_json_record
from shardpipe.journal.unfinished import UnfinishedJob, same_call
from shardpipe.rechunking.intermediate import remove_copy
from shardpipe.storage.keys import INTERMEDIATE_RECORD
from shardpipe.storage.resolve import ResolvedStore

CopyState = Literal["copying", "copied"]


def copy_identity(source: dict[str, Any], chunk_shape: tuple[int, ...]) -> dict[str, Any]:
    """What a copy is: its source's identity and its chunks."""
    return {"source": source, "chunks": list(chunk_shape)}


def save_copy_record(
    target: ResolvedStore, identity: dict[str, Any], store: str, placed: bool, state: CopyState
) -> None:
    """Save (or replace) the record of the copy at ``store`` under ``target``'s job folder."""
    record = {**identity, "store": store, "placed": placed, "state": state}
    target.shards.put(target.key(INTERMEDIATE_RECORD), [json.dumps(record).encode()])
    target.shards.make_durable([target.key(INTERMEDIATE_RECORD)])


def read_copy_record(target: ResolvedStore) -> dict[str, Any] | None:
    """The record of a copy saved under ``target``, or None.

    Raises
    ------
    MetadataError
        If it is not a JSON object with the fields :func:`save_copy_record` writes.
    """
    key = target.key(INTERMEDIATE_RECORD)
    record = read_json_record(target, key, "intermediate record")
    if record is None:
        return None
    fields = {"source", "chunks", "store", "placed", "state"}
    if (
        not fields <= record.keys()
        or not isinstance(record["store"], str)
        or record["state"] not in ("copying", "copied")
    ):
        raise MetadataError(
            f"intermediate record {key!r} lacks {', '.join(sorted(fields))} or holds other "
            f"values; delete it (and the copy it names) and rechunk again with "
            f"{advice.setting('overwrite')}"
        )
    return record


def check_same_copy(
    record: dict[str, Any], identity: dict[str, Any], temp_store: str | None
) -> None:
    """Refuse to resume from a copy of another source or plan, or at another place.

    Raises
    ------
    InvalidArgumentError
        Naming ``resume`` (or ``temp_store``), what differs and the fix.
    """
    different = [k for k in ("source", "chunks") if record[k] != identity[k]]
    if different:
        what = " and ".join(
            f"{k} (recorded {json.dumps(record[k])}, this rechunk {json.dumps(identity[k])})"
            for k in different
        )
        planned = different != ["source"]  # the copy's chunks: a plan's, of its version
        raise InvalidArgumentError(
            "resume",
            f"the intermediate copy at {record['store']!r} was made by another rechunk"
            f"{' (or another version of shardpipe)' if planned else ''}: its "
            f"{what} {'differ' if planned else 'differs'}",
            "Run the same call as the interrupted one (the same source, "
            f"{advice.name('shards')}, {advice.name('chunks')} and {advice.name('max_mem')}"
            f"{', with the same shardpipe' if planned else ''}), "
            f"or start again with {advice.setting('overwrite')}",
        )
    if temp_store is not None and temp_store != record["store"]:
        raise InvalidArgumentError(
            "temp_store",
            f"{temp_store!r}, but the interrupted rechunk kept its copy at {record['store']!r}",
            f"Pass {advice.setting('temp_store', record['store'])} (or leave it out) to resume "
            "from that copy, "
            f"or start again with {advice.setting('overwrite')}",
        )


def delete_copy_record(target: ResolvedStore) -> None:
    """Delete the record, and the job folder (on a file system) if nothing else is in it."""
    target.shards.delete(target.key(INTERMEDIATE_RECORD))
    target.shards.prune(target.key(""))


def forget_copy(
    target: ResolvedStore,
    record: dict[str, Any],
    keep: str,
    storage_options: dict[str, Any] | None,
) -> None:
    """Before a new copy: delete an old one shardpipe placed (unless at ``keep``) and its record.

    ``storage_options`` are those of the new copy (a copy placed beside the
    target is on the target's store).
    """
    if record["placed"] and record["store"] != keep:
        remove_copy(record["store"], storage_options)
    target.shards.delete(target.key(INTERMEDIATE_RECORD))


def copy_job(target: ResolvedStore) -> UnfinishedJob | None:
    """The two-pass rechunk into ``target`` whose record of its copy is still there, or None.

    The record is deleted once the copy is gone: while it is there, the
    rechunk did not finish (a record that cannot be read is ``verify``'s to
    report).
    """
    try:
        record = read_copy_record(target)
    except MetadataError:
        return None
    if record is None:
        return None
    state = "its copy complete" if record["state"] == "copied" else "its copy part way"
    return UnfinishedJob(
        "rechunk-copy",
        target.key(INTERMEDIATE_RECORD),
        f"the rechunk's target at {advice.place(target.path)} ({state}, in {record['store']!r})",
        None,
        f"run {same_call('rechunk', 'rechunk')} with {advice.setting('resume')}",
    )
