"""An OME-Zarr image group as stored: its metadata and its level arrays, read back.

Used by updates (appends, region writes), by adding labels to an existing
image, and by ``verify``/``repair`` of a group as a whole.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardpipe.core.grid import Shape
from shardpipe.core.pyramid import level_shape
from shardpipe.errors import InvalidArgumentError, MetadataError
from shardpipe.internals.zarr_core import ArrayV3Metadata
from shardpipe.ome.metadata import StoredMultiscale, read_multiscale
from shardpipe.storage.resolve import ResolvedStore
from shardpipe.stored.metadata import read_node_metadata

__all__ = ["StoredImage", "group_attributes", "is_ome_image", "read_image"]


def group_attributes(target: ResolvedStore, path: str = "") -> dict[str, Any] | None:
    """The attributes of the group at ``path`` inside ``target``, or None if no group is there.

    Raises
    ------
    shardpipe.errors.MetadataError
        When its ``zarr.json`` is not JSON.
    """
    key = target.key(f"{path}/zarr.json" if path else "zarr.json")
    data = target.shards.get(key)
    if data is None:
        return None
    try:
        document = json.loads(data)
    except ValueError as err:
        raise MetadataError(f"{key} is not JSON ({err})") from err
    if not isinstance(document, dict) or document.get("node_type") != "group":
        return None
    attributes = document.get("attributes", {})
    return attributes if isinstance(attributes, dict) else None


def is_ome_image(target: ResolvedStore) -> bool:
    """Whether a group with OME-Zarr ``multiscales`` is at ``target``."""
    try:
        attributes = group_attributes(target)
    except MetadataError:
        return False
    ome = attributes.get("ome") if attributes else None
    return isinstance(ome, dict) and "multiscales" in ome


@dataclass(frozen=True)
class StoredImage:
    """An image group's multiscales and its level arrays' shapes.

    Parameters
    ----------
    multiscale : StoredMultiscale
        The parsed metadata.
    shapes : list of tuple of int
        Each level array's shape, in level order.
    dtype : numpy.dtype
        The arrays' data type.
    attributes : dict
        The group's attributes as stored.
    """

    multiscale: StoredMultiscale
    shapes: list[Shape]
    dtype: np.dtype[Any]
    attributes: dict[str, Any]

    @property
    def factors(self) -> list[Shape]:
        """Each level's factor relative to level 0."""
        return self.multiscale.factors

    def consistency_problems(self) -> list[str]:
        """How the level shapes break the pyramid (level ``k``: ``ceil(shape_0 / F_k)``)."""
        problems = []
        try:
            factors = self.factors
        except MetadataError as err:
            return [str(err)]
        for path, shape, factor in zip(self.multiscale.paths, self.shapes, factors, strict=True):
            expected = level_shape(self.shapes[0], factor)
            if shape != expected:
                problems.append(
                    f"level {path!r} has the shape {shape}, but level 0's {self.shapes[0]} "
                    f"downsampled by {factor} is {expected}"
                )
        return problems


def read_image(target: ResolvedStore, parameter: str = "store") -> StoredImage:
    """Read the image group at ``target``: its multiscales and its level arrays.

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        Naming ``parameter`` when no OME-Zarr 0.5 image group is there, or a
        level array is missing or not an array of the image's dtype.
    """
    where = target.path or "the store root"
    attributes = group_attributes(target)
    if attributes is None:
        raise InvalidArgumentError(
            parameter,
            f"there is no Zarr group at {where!r}",
            "Write the image first (to_ome_zarr without region/append_dim), or fix the path",
        )
    try:
        multiscale = read_multiscale(attributes, repr(where))
    except MetadataError as err:
        raise InvalidArgumentError(
            parameter, str(err), "Point at an OME-Zarr 0.5 image group"
        ) from err
    shapes: list[Shape] = []
    dtypes = set()
    for path in multiscale.paths:
        metadata = read_node_metadata(target.shards, target.key(f"{path}/zarr.json"))
        if not isinstance(metadata, ArrayV3Metadata):
            raise InvalidArgumentError(
                parameter,
                f"the level {path!r} of the image at {where!r} is not a Zarr v3 array",
                "Repair or rewrite the image",
            )
        shapes.append(tuple(int(n) for n in metadata.shape))
        dtypes.add(np.dtype(metadata.dtype.to_native_dtype()))
    if len(dtypes) != 1:
        raise InvalidArgumentError(
            parameter,
            f"the levels of the image at {where!r} have the dtypes {sorted(map(str, dtypes))}",
            "Rewrite the image",
        )
    return StoredImage(multiscale, shapes, dtypes.pop(), attributes)
