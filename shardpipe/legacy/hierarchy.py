"""Reading a hierarchy of the sharding storage-transformer draft (for migrate, verify, info).

:func:`read_draft` finds the draft's entry point (``zarr.json`` naming the
core protocol URL), reads every node's document under ``meta/`` and
translates it (:mod:`shardpipe.legacy.metadata`). An array's shards lie
under ``data/root/<path>/``: :func:`shard_target` is that folder as a
:class:`~shardpipe.storage.resolve.ResolvedStore`, so the code that lists
and checks the shards of a v3 array serves the draft's too, with the
draft's shard format (:class:`~shardpipe.formats.legacy_sharding.LegacyShardingFormat`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from shardpipe.core.documents import parse_json_object
from shardpipe.core.keys import checked_key
from shardpipe.errors import InvalidArgumentError, UnsupportedLegacyError
from shardpipe.legacy.metadata import (
    FIX,
    LegacyArray,
    is_draft_entry_point,
    translate_array,
    translate_group,
)
from shardpipe.storage.base import ShardStore
from shardpipe.storage.resolve import ResolvedStore
from shardpipe.stored.array_document import metadata_fix


@dataclass
class Draft:
    """A draft hierarchy, translated.

    Attributes
    ----------
    arrays : list of LegacyArray
        Its arrays that Zarr v3 can express.
    groups : dict
        Path to the v3 ``zarr.json`` of every group (with the implicit
        parents of its nodes, which v3 needs written).
    unsupported : dict
        Path to what v3 cannot express, for the arrays left out (only
        when not ``strict``).
    """

    arrays: list[LegacyArray] = field(default_factory=list)
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)
    unsupported: dict[str, str] = field(default_factory=dict)


def read_json(store: ShardStore, key: str) -> dict[str, Any] | None:
    """The JSON object at ``key`` (None when absent)."""
    raw = store.get(key)
    return None if raw is None else parse_json_object(raw, repr(key), metadata_fix("node"))


def read_draft(
    target: ResolvedStore,
    *,
    add_crc32c: bool = False,
    zlib_as_gzip: bool = False,
    strict: bool = True,
) -> Draft | None:
    """The draft hierarchy at ``target``, or None when there is none.

    Parameters
    ----------
    target : ResolvedStore
        The hierarchy's root (where the entry point ``zarr.json`` is).
    add_crc32c : bool
        Translate arrays with a CRC32C after their shard index.
    zlib_as_gzip : bool
        Translate zlib arrays to ``gzip`` (their chunks to be re-wrapped).
    strict : bool
        Raise on the first array v3 cannot express; else list it in
        :attr:`Draft.unsupported`.

    Raises
    ------
    shardpipe.errors.UnsupportedLegacyError
        With ``strict``.
    shardpipe.errors.InvalidArgumentError
        When the hierarchy has no node.
    """
    if not is_draft_entry_point(read_json(target.shards, target.key("zarr.json"))):
        return None
    draft = Draft()
    nodes = list(_nodes(target))
    misplaced = _misplaced(nodes)
    for path, kind, document in nodes:
        try:
            if path in misplaced:
                raise UnsupportedLegacyError(path, misplaced[path], FIX)
            if kind == "group":
                draft.groups[path] = translate_group(document, path)
                continue
            draft.arrays.append(
                translate_array(path, document, add_crc32c=add_crc32c, zlib_as_gzip=zlib_as_gzip)
            )
        except UnsupportedLegacyError as err:
            if strict:
                raise
            draft.unsupported[path] = err.what
    if not draft.arrays and not draft.groups and not draft.unsupported:
        raise InvalidArgumentError(
            "source", "the draft hierarchy has no node under meta/", "Pass a non-empty hierarchy"
        )
    for path in [a.path for a in draft.arrays] + list(draft.groups):
        parts = path.split("/")[:-1] if path else []
        for depth in range(len(parts) + 1):
            parent = "/".join(parts[:depth])
            if parent not in draft.groups and parent != path:
                draft.groups[parent] = translate_group({})
    return draft


def _misplaced(nodes: list[tuple[str, str, dict[str, Any]]]) -> dict[str, str]:
    """Path to why, for nodes a v3 hierarchy cannot hold: twice named, or under an array."""
    kinds: dict[str, list[str]] = {}
    for path, kind, _ in nodes:
        kinds.setdefault(path, []).append(kind)
    why = {path: "is both an array and a group" for path, k in kinds.items() if len(k) > 1}
    arrays = {path for path, k in kinds.items() if k == ["array"]}
    for path in kinds:
        parts = path.split("/") if path else []
        ancestors = ["/".join(parts[:depth]) for depth in range(len(parts))]
        if under := [a for a in ancestors if a in arrays]:
            why.setdefault(path, f"lies under the array {under[0] or '/'!r}")
    return why


def _nodes(target: ResolvedStore) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """``(path, "array" or "group", document)`` of every node the draft lists under ``meta/``.

    A node's path comes from a listed key, so it is checked to stay inside
    the hierarchy (:func:`~shardpipe.core.keys.checked_key`) before
    anything is read or written for it.

    Raises
    ------
    shardpipe.errors.UnsafeKeyError
        For a node named ``..``, ``.`` (``meta/root/...array.json``) or with
        such a part, naming its document.
    """
    meta = target.key("meta/")
    for key in target.shards.list(meta):
        name = key[len(meta) :]
        for kind in ("array", "group"):
            suffix = f".{kind}.json"
            path = None
            if name == f"root{suffix}":
                path = ""
            elif name.startswith("root/") and name.endswith(suffix):
                # a name from a listing: on S3 it may hold "..", on any store "..." gives ".."
                path = checked_key(name[len("root/") : -len(suffix)], f"the draft document {key!r}")
            document = read_json(target.shards, key) if path is not None else None
            if path is not None and document is not None:
                yield path, kind, document


def shard_target(target: ResolvedStore, array: LegacyArray) -> ResolvedStore:
    """The folder of ``array``'s draft shards (``data/root/<path>``) as a target."""
    data = f"data/root/{array.path}" if array.path else "data/root"
    return ResolvedStore(target.zarr_store, target.shards, target.key(data))


def each_array[T](
    target: ResolvedStore, draft: Draft, check: Callable[[ResolvedStore, LegacyArray], T]
) -> dict[str, T]:
    """``check(shard folder, array)`` of every array of ``draft``, by path."""
    return {array.path: check(shard_target(target, array), array) for array in draft.arrays}
