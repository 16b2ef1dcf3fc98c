"""What a migration will do, read and checked before anything is written (for ``migrate``).

:func:`plan_migration` reads and translates every node of the draft and
reads and checks every shard's index; the ``refuse_*`` functions stop a
migration whose writes would land on keys it does not own, or whose
in-place deletion of the draft would take something else with it. All of
this happens before the marker is written: a refusal leaves every store
as it was.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from shardpipe.errors import InvalidArgumentError, ShardFormatError
from shardpipe.formats.base import read_checked_index
from shardpipe.legacy.copy import DraftShard
from shardpipe.legacy.hierarchy import read_draft, shard_target
from shardpipe.legacy.marker import MigrationMarker
from shardpipe.legacy.metadata import LegacyArray
from shardpipe.storage.keys import JOB_DIR
from shardpipe.storage.resolve import ResolvedStore

SHARD_KEY = re.compile(r"c(?:[./][0-9]+)*")
"""A shard key of the default chunk key encoding, relative to its array."""


@dataclass
class MigrationPlan:
    """Every node of a draft, translated, and every shard to copy."""

    arrays: list[LegacyArray]
    groups: dict[str, dict[str, Any]]
    shards: list[DraftShard]

    def documents(self) -> dict[str, dict[str, Any]]:
        """The v3 ``zarr.json`` of every node by key (relative), the root's last."""
        nodes = {a.path: a.document for a in self.arrays} | self.groups
        return {
            f"{path}/zarr.json" if path else "zarr.json": nodes[path]
            for path in sorted(nodes, key=lambda p: (p == "", p))
        }

    def array_paths(self) -> list[str]:
        """The paths of its arrays."""
        return [a.path for a in self.arrays]


def shard_keys(dst: ResolvedStore, array: str) -> Iterator[str]:
    """The keys naming a shard (``c``, ``c/0/1``, ``c.0.1``) in the v3 folder of ``array``.

    Only those: at the root (a root array) other keys may start with ``c``.
    """
    folder = dst.key(f"{array}/" if array else "")
    for key in dst.shards.list(f"{folder}c"):
        if SHARD_KEY.fullmatch(key[len(folder) :]):
            yield key


def plan_migration(src: ResolvedStore, add_crc32c: bool, zlib_as_gzip: bool) -> MigrationPlan:
    """Translate every node and read every shard's index (nothing written)."""
    draft = read_draft(src, add_crc32c=add_crc32c, zlib_as_gzip=zlib_as_gzip, strict=True)
    assert draft is not None  # the entry point was read just now
    shards = [shard for array in draft.arrays for shard in _shards(src, array)]
    return MigrationPlan(draft.arrays, draft.groups, shards)


def _shards(src: ResolvedStore, array: LegacyArray) -> Iterator[DraftShard]:
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
        yield DraftShard(array, key, coords, size)


def refuse_clashes(plan: MigrationPlan) -> None:
    """In place, a node named ``meta`` or ``data`` at the top would be deleted with the draft."""
    for path in [a.path for a in plan.arrays] + list(plan.groups):
        if path.split("/")[0] in ("meta", "data"):
            raise InvalidArgumentError(
                "source",
                f"node {path!r} would lie under the draft's own {path.split('/')[0]}/ folder, "
                "which an in-place migration deletes",
                "Migrate to another target",
            )


def refuse_strays(src: ResolvedStore, plan: MigrationPlan) -> None:
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


def refuse_occupied(
    dst: ResolvedStore, target: Any, plan: MigrationPlan, earlier: MigrationMarker | None
) -> None:
    """Refuse a key where this run would write that no run of this migration wrote.

    A target must be empty at the first run. In place (and at a re-run, for
    the nodes the interrupted run did not plan) no shard key may lie in the
    v3 folder of an array, nor a node's ``zarr.json`` (but the root's, the
    draft's entry point).
    """
    if target is not None and earlier is None:
        ours = dst.key(f"{JOB_DIR}/")  # a marker being written when a first run was killed
        for key in itertools.filterfalse(
            lambda k: k.startswith(ours), dst.shards.list(dst.key(""))
        ):
            raise InvalidArgumentError(
                "target",
                f"{target!r} is not empty (it holds {key!r})",
                "Pass an empty folder or URL, or leave target out to migrate in place",
            )
        return
    known_documents = set(earlier.documents if earlier else ())
    known_arrays = set(earlier.arrays if earlier else ())
    documents = [k for k in plan.documents() if k != "zarr.json" and k not in known_documents]
    taken = [dst.key(k) for k in documents if dst.shards.size(dst.key(k)) is not None]
    for array in set(plan.array_paths()) - known_arrays:
        taken += itertools.islice(shard_keys(dst, array), 1)
    for key in taken:
        raise InvalidArgumentError(
            "target" if target is not None else "source",
            f"{key!r} lies where the v3 hierarchy would be written",
            "Move it away, or migrate to another target",
        )
