"""The job record of a write: what made an array, saved beside its ``zarr.json``.

:data:`~shardpipe.storage.keys.WRITE_RECORD` holds the identity of the write that made the
array (its source and its ``zarr.json``), its state (``"running"`` or
``"complete"``), the run that made it and the waves done. Resuming a write
(:mod:`shardpipe.write.resume`) compares it with the new write's identity;
``verify`` reports a write that never completed
(:mod:`shardpipe.journal.leftovers`).
"""

from __future__ import annotations

import json
from typing import Any

from shardpipe import advice
from shardpipe.errors import MetadataError
from shardpipe.storage.keys import WRITE_RECORD
from shardpipe.storage.resolve import ResolvedStore


def job_identity(source: dict[str, Any], metadata_document: dict[str, Any]) -> dict[str, Any]:
    """The identity of a write of a new array, as its job record holds it.

    Parameters
    ----------
    source : dict
        What the source is (``{"dask": <name>}``, or a rechunk's description).
    metadata_document : dict
        The target's ``zarr.json`` as a JSON document.

    Returns
    -------
    dict
        ``{"source": ..., "target": ...}``.
    """
    return {"source": source, "target": metadata_document}


def record_bytes(
    identity: dict[str, Any],
    state: str,
    run: str | None = None,
    waves: dict[str, int] | None = None,
) -> bytes:
    """The job record of a write with ``identity`` in ``state``, made by the run ``run``.

    ``waves`` (``{"shards_per_wave": n, "done": k}``) says that the first
    ``k`` waves of ``n`` shards each are complete.
    """
    record = {**identity, "state": state, "run": run}
    if waves is not None:
        record["waves"] = waves
    return json.dumps(record, sort_keys=True).encode()


def read_json_record(target: ResolvedStore, key: str, what: str) -> dict[str, Any] | None:
    """The JSON object stored at ``key`` (a record of ``what``), or None when absent.

    Raises
    ------
    MetadataError
        If it is not JSON, or not an object.
    """
    data = target.shards.get(key)
    if data is None:
        return None
    try:
        record = json.loads(data)
    except (ValueError, RecursionError) as err:
        raise MetadataError(f"{what} {key!r} is not JSON ({err})") from err
    if not isinstance(record, dict):
        raise MetadataError(f"{what} {key!r} is not a JSON object; delete it")
    return record


def read_record(target: ResolvedStore) -> dict[str, Any] | None:
    """The job record saved beside the array at ``target``, or None.

    Raises
    ------
    MetadataError
        If the record is not a JSON object with ``source``, ``target`` and ``state``.
    """
    key = target.key(WRITE_RECORD)
    record = read_json_record(target, key, "job record")
    if record is None:
        return None
    if not {"source", "target", "state"} <= record.keys():
        raise MetadataError(
            f"job record {key!r} lacks source, target or state; delete it and write the "
            f"array again with {advice.setting('overwrite')}"
        )
    if not isinstance(record["target"], dict) or not isinstance(record["state"], str):
        raise MetadataError(
            f"job record {key!r}: its target is not an object or its state not a string; "
            f"delete it and write the array again with {advice.setting('overwrite')}"
        )
    return record


def save_record(
    target: ResolvedStore,
    identity: dict[str, Any],
    state: str,
    run: str | None = None,
    *,
    waves: dict[str, int] | None = None,
) -> None:
    """Save (or replace) the job record of the array at ``target``.

    ``run`` is a token unique to one run of the write: a task that creates the
    array and runs a second time (its first worker died after creating it)
    finds its own token and leaves the array as it is. ``waves`` records the
    waves done (see :func:`record_bytes`).
    """
    target.shards.put(target.key(WRITE_RECORD), [record_bytes(identity, state, run, waves)])


def waves_done(record: dict[str, Any]) -> tuple[int, int] | None:
    """``(shards per wave, waves done)`` of a job record, or None if it records none."""
    waves = record.get("waves")
    if not isinstance(waves, dict):
        return None
    size, done = waves.get("shards_per_wave"), waves.get("done")
    if not isinstance(size, int) or not isinstance(done, int) or size < 1 or done < 0:
        return None
    return size, done


def delete_record(target: ResolvedStore) -> None:
    """Remove the job record of the array at ``target`` (first step of an overwrite)."""
    target.shards.delete(target.key(WRITE_RECORD))
