"""What a maintenance command looks at: one dispatch over the kinds of target.

``verify`` and ``info`` accept a sharded Zarr v3 array, a Zarr group (each
sharded array in it), an OME-Zarr image group (each level array, and what
the group itself records), a hierarchy of the sharding storage-transformer
draft (each array, read through the draft's shard format) and a Neuroglancer
precomputed volume. :func:`over_target` tells them apart, in that order of
precedence (a volume's ``info`` file, the draft's documents, an OME-Zarr
image group, any other group, an array), and calls the caller's function for
what it found. ``repair``, which works on one array or on an OME-Zarr image
as a whole, asks :func:`is_image_group`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from shardpipe.formats.precomputed_info import VolumeInfo
from shardpipe.formats.zarr_sharding import ZarrShardingFormat
from shardpipe.internals.zarr_core import ArrayV3Metadata
from shardpipe.legacy.hierarchy import each_array, read_draft
from shardpipe.maintenance.groups import group_at, per_array
from shardpipe.ome.stored import is_ome_image
from shardpipe.precomputed.check import read_info
from shardpipe.storage.resolve import ResolvedStore
from shardpipe.stored.places import check_node_present


@dataclass(frozen=True)
class ArrayAt:
    """One array to look at.

    Attributes
    ----------
    target : ResolvedStore
        Where the array is.
    metadata : ArrayV3Metadata or None
        For an array of the draft: its metadata translated to Zarr v3; None
        means the ``zarr.json`` at ``target``.
    shard_format : ZarrShardingFormat or None
        For an array of the draft: the draft's shard format; None means the
        one its metadata gives.
    """

    target: ResolvedStore
    metadata: ArrayV3Metadata | None = None
    shard_format: ZarrShardingFormat | None = None


def over_target[A, V, G](
    target: ResolvedStore,
    parameter: str,
    *,
    volume: Callable[[ResolvedStore, VolumeInfo], V],
    array: Callable[[ArrayAt], A],
    arrays: Callable[[dict[str, A], dict[str, str]], G],
    image: Callable[[ResolvedStore, dict[str, A], dict[str, str]], G] | None = None,
) -> V | A | G:
    """Call the function for the kind of node at ``target``; return what it returns.

    Parameters
    ----------
    target : ResolvedStore
        Where the node is.
    parameter : str
        The argument that named it (``"store"`` or ``"path"``), for errors.
    volume : callable
        Called with the target and its checked ``info`` for a precomputed volume.
    array : callable
        Called for each array: the one at ``target``, or each of a group or
        a draft hierarchy.
    arrays : callable
        Called, for a group or a draft hierarchy, with the results of
        ``array`` by store path and the arrays skipped with the reason.
    image : callable, optional
        Called instead of ``arrays`` for an OME-Zarr image group, with the
        group's location first (to look at what the group records beside
        its arrays); without it, such a group is a group like any other.

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        If nothing is at ``target`` (naming ``parameter``).
    """
    if (info := read_info(target)) is not None:
        return volume(target, info)
    if (draft := read_draft(target, strict=False)) is not None:
        found = each_array(
            target, draft, lambda folder, a: array(ArrayAt(folder, a.metadata, a.shard_format))
        )
        return arrays(found, dict(draft.unsupported))
    check_node_present(target, parameter)
    group = group_at(target)
    if group is not None:
        found, skipped = per_array(target, group, lambda t: array(ArrayAt(t)))
        if image is not None and is_image_group(target):
            return image(target, found, skipped)
        return arrays(found, skipped)
    return array(ArrayAt(target))


def is_image_group(target: ResolvedStore) -> bool:
    """Whether an OME-Zarr image group (a group with ``multiscales``) is at ``target``."""
    return is_ome_image(target)
