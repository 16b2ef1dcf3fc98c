"""``resume=True`` after an OME-Zarr write that finished: recognised, and nothing written again.

A pyramid write removes the group's record (:data:`~shardpipe.ome.run.GROUP_RECORD`)
once every level is written (:mod:`shardpipe.ome.run`). The same call with
``resume=True`` afterwards (a script run again, a write killed after its
last step) finds the image and no record. As ``to_sharded_zarr`` does for an
array whose write completed, it is accepted when that write made it, and
writes no shard:

- every group the write makes holds the attributes this write gives it
  (:func:`check_finished_write`: the image's, the ``labels`` group's, each
  label image's), so the same image, axes, scales and names;
- every level array was made by the same write: its own job record holds
  the same source and metadata, and its shards are complete (each level's
  planned write checks it, :mod:`shardpipe.write.resume`).

Anything else is refused, naming ``resume`` and what differs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from shardpipe import advice
from shardpipe.errors import InvalidArgumentError
from shardpipe.ome.metadata import labels_attributes
from shardpipe.ome.run import GROUP_RECORD
from shardpipe.ome.stored import group_attributes
from shardpipe.storage.resolve import ResolvedStore

__all__ = ["check_finished_write", "finished_image_there"]


def finished_image_there(
    target: ResolvedStore, resume: object, record: dict[str, Any] | None
) -> bool:
    """Whether ``resume`` meets a group at ``target`` that records no write under way."""
    if not resume or record is not None:
        return False
    return target.shards.size(target.key("zarr.json")) is not None


def check_finished_write(
    target: ResolvedStore, identity: dict[str, Any], label_names: Sequence[str]
) -> None:
    """Refuse unless the groups at ``target`` hold what the write of ``identity`` writes.

    Parameters
    ----------
    target : ResolvedStore
        The image group.
    identity : dict
        The write's identity (:func:`~shardpipe.ome.prepare.prepare_ome_zarr`):
        the image's attributes (None when only labels are written) and each
        label image's, by path.
    label_names : sequence of str
        Every name the ``labels`` group lists after the write.

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        Naming ``resume`` and the first group whose attributes differ.
    """
    expected: dict[str, Any] = {}
    if identity.get("image") is not None:
        expected[""] = identity["image"]
    # an image written without labels has no labels group; labels added are listed there
    expected["labels"] = labels_attributes(label_names) if label_names else None
    expected.update(identity.get("labels") or {})
    for path, attributes in expected.items():
        stored = group_attributes(target, path)
        wanted = None if attributes is None else json.loads(json.dumps(attributes))
        if stored == wanted:
            continue
        where = advice.place(target.key(path).rstrip("/"))
        if wanted is None:
            what = f"the group {where} is there, which this write does not make"
        elif stored is None:
            what = f"the group {where} this write makes is missing"
        else:
            what = f"the group {where} holds other attributes than this write gives it"
        raise InvalidArgumentError(
            "resume",
            f"no unfinished write is recorded at {target.key(GROUP_RECORD)!r}, and {what}: "
            "the image there was written by another write or with other arguments",
            "Pass the same image and arguments as the write that made it, or write anew "
            f"with {advice.setting('overwrite')}",
        )
