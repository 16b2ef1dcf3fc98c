"""Walk a Zarr group: every sharded array in it, and those skipped with the reason.

``shardpipe.verify`` and ``shardpipe.info`` (and their commands) accept a
group as well as an array; for a group they report each sharded array on a
line of its own, then a total. Arrays that are not sharded Zarr v3 arrays
are listed as skipped, with the reason.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any

import zarr

from shardpipe.errors import ShardpipeError
from shardpipe.internals.zarr_core import ArrayV3Metadata
from shardpipe.storage.resolve import ResolvedStore
from shardpipe.stored.metadata import (
    ZARR_PARSE_ERRORS,
    broken_metadata,
    check_tree_metadata,
    is_sharded,
    read_node_metadata,
)


def group_at(target: ResolvedStore) -> zarr.Group | None:
    """The group at the target, or None when the node there is an array (or nothing).

    Raises
    ------
    shardpipe.errors.MetadataError
        If the node's ``zarr.json`` is broken.
    """
    if isinstance(read_node_metadata(target.shards, target.key("zarr.json")), ArrayV3Metadata):
        return None
    try:
        node = zarr.open(store=target.zarr_store, path=target.path, mode="r")
    except (FileNotFoundError, KeyError, zarr.errors.NodeNotFoundError):
        return None
    return node if isinstance(node, zarr.Group) else None


def walk_arrays(group: zarr.Group) -> Iterator[tuple[str, str | None]]:
    """Every array under ``group`` (nested groups included), sorted by path.

    Yields ``(store path, None)`` for a sharded Zarr v3 array and
    ``(store path, reason)`` for one shardpipe skips.
    """
    with warnings.catch_warnings():
        # folders without a zarr.json are no node, and zarr says so in a warning: a group's
        # own shardpipe records, and the level of an image whose write stopped before its
        # zarr.json (holding its job record; the image's checks report the missing level)
        warnings.filterwarnings("ignore", "Object at .* is not recognized", UserWarning)
        members = list(group.members(max_depth=None))
    arrays = [node for _, node in members if isinstance(node, zarr.Array)]
    for array in sorted(arrays, key=lambda a: str(a.path)):
        if is_sharded(array.metadata):
            yield str(array.path), None
        elif array.metadata.zarr_format == 2:
            yield str(array.path), "a Zarr v2 array"
        else:
            yield str(array.path), "not sharded"


def per_array(
    target: ResolvedStore, group: zarr.Group, report: Callable[[ResolvedStore], Any]
) -> tuple[dict[str, Any], dict[str, str]]:
    """Run ``report`` on every sharded array of the group; return results and skipped arrays."""
    results: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    check_tree_metadata(target.shards, target.key(""))  # zarr skips some broken members
    try:
        arrays = list(walk_arrays(group))
    except (FileNotFoundError, ShardpipeError):
        raise
    except ZARR_PARSE_ERRORS as err:  # a node under the group has metadata zarr cannot read
        raise broken_metadata(target.shards, target.key(""), err) from err
    for path, reason in arrays:
        if reason is None:
            results[path] = report(ResolvedStore(target.zarr_store, target.shards, path))
        else:
            skipped[path] = reason
    return results, skipped
