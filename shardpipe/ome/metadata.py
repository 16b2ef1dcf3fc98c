"""The OME-Zarr 0.5 metadata of an image group, its labels, and reading it back.

An image group's ``zarr.json`` holds ``attributes.ome``::

    {"version": "0.5",
     "multiscales": [{"name": ..., "axes": [...],
                      "datasets": [{"path": "0", "coordinateTransformations": [
                                       {"type": "scale", "scale": [...]},
                                       {"type": "translation", "translation": [...]}]}, ...],
                      "type": "mean", "metadata": {...}}],
     "omero": {...}}                                  (optional)

``labels/zarr.json`` lists the label images (``{"labels": ["cells"]}``) and
each ``labels/<name>/zarr.json`` is an image group with an ``image-label``
object (``colors``, ``properties``, ``source``).

Level ``k`` of factor ``F`` over a level 0 of voxel size ``s`` and origin
``o`` has the voxel size ``s F`` and the origin ``o + s (F - 1) / 2``: a
level-``k`` voxel is the window of ``F`` level-0 voxels, and sits at its
centre.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from shardpipe.core.checks import json_problem
from shardpipe.errors import InvalidArgumentError, MetadataError
from shardpipe.ome.axes import Axis, axes_from_document

__all__ = [
    "NGFF_VERSION",
    "StoredMultiscale",
    "image_attributes",
    "label_attributes",
    "labels_attributes",
    "level_transforms",
    "multiscale",
    "omero_document",
    "read_multiscale",
]

NGFF_VERSION = "0.5"


def level_transforms(
    scale: Sequence[float], translation: Sequence[float], factor: Sequence[int]
) -> list[dict[str, Any]]:
    """The ``coordinateTransformations`` of a level: its scale, and its translation if any."""
    scaled = [s * f for s, f in zip(scale, factor, strict=True)]
    moved = [o + s * (f - 1) / 2 for o, s, f in zip(translation, scale, factor, strict=True)]
    out: list[dict[str, Any]] = [{"type": "scale", "scale": scaled}]
    if any(v != 0 for v in moved):
        out.append({"type": "translation", "translation": moved})
    return out


def multiscale(
    name: str | None,
    axes: Sequence[Axis],
    paths: Sequence[str],
    factors: Sequence[Sequence[int]],
    scale: Sequence[float],
    translation: Sequence[float],
    method: str,
    version: str,
) -> dict[str, Any]:
    """One ``multiscales`` entry: axes, one dataset per level, how levels were made."""
    document: dict[str, Any] = {}
    if name is not None:
        document["name"] = name
    document["axes"] = [a.to_json() for a in axes]
    document["datasets"] = [
        {"path": path, "coordinateTransformations": level_transforms(scale, translation, factor)}
        for path, factor in zip(paths, factors, strict=True)
    ]
    document["type"] = method
    document["metadata"] = {
        "description": f"each level the {method} of windows of the level before, in one pass",
        "method": "shardpipe.core.downsample.downsample_block",
        "version": version,
        "kwargs": {"method": method},
    }
    return document


def image_attributes(multiscales: dict[str, Any], omero: dict[str, Any] | None) -> dict[str, Any]:
    """``attributes`` of an image group's ``zarr.json``."""
    ome: dict[str, Any] = {"version": NGFF_VERSION, "multiscales": [multiscales]}
    if omero is not None:
        ome["omero"] = omero
    return {"ome": ome}


def labels_attributes(names: Sequence[str]) -> dict[str, Any]:
    """``attributes`` of the ``labels`` group: the names of its label images."""
    return {"ome": {"version": NGFF_VERSION, "labels": list(names)}}


def label_attributes(
    multiscales: dict[str, Any],
    colors: list[dict[str, Any]] | None,
    properties: list[dict[str, Any]] | None,
) -> dict[str, Any]:
    """``attributes`` of a label image group: its multiscales and ``image-label``."""
    label: dict[str, Any] = {}
    if colors is not None:
        label["colors"] = colors
    if properties is not None:
        label["properties"] = properties
    label["source"] = {"image": "../../"}
    return {"ome": {"version": NGFF_VERSION, "image-label": label, "multiscales": [multiscales]}}


def omero_document(omero: Any, channel_names: Any, n_channels: int) -> dict[str, Any] | None:
    """The ``omero`` object: as given (checked), or made from ``channel_names``.

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        Naming ``omero`` or ``channel_names``.
    """
    if omero is not None and channel_names is not None:
        raise InvalidArgumentError(
            "channel_names", "given together with omero", "Put the channel labels in omero"
        )
    if channel_names is not None:
        if (
            isinstance(channel_names, str)
            or not isinstance(channel_names, Sequence)
            or not all(isinstance(n, str) for n in channel_names)
        ):
            raise InvalidArgumentError(
                "channel_names",
                f"expected a list of strings, got {channel_names!r}",
                "Pass e.g. ['DAPI', 'GFP']",
            )
        if len(channel_names) != n_channels:
            raise InvalidArgumentError(
                "channel_names",
                f"{len(channel_names)} names for {n_channels} channels",
                "Name every channel once",
            )
        return {"channels": [{"label": n, "active": True} for n in channel_names]}
    if omero is None:
        return None
    problem = json_problem(omero, "omero")
    if not isinstance(omero, Mapping) or problem is not None:
        raise InvalidArgumentError(
            "omero",
            problem or f"expected a JSON object, got {type(omero).__name__}",
            "Pass the spec's omero object, e.g. {'channels': [{'label': 'DAPI', "
            "'color': '0000FF', 'window': {'start': 0, 'end': 1000, 'min': 0, 'max': 65535}}]}",
        )
    channels = omero.get("channels")
    if channels is not None and (not isinstance(channels, list) or len(channels) != n_channels):
        raise InvalidArgumentError(
            "omero",
            f"its channels list has {len(channels) if isinstance(channels, list) else channels!r}"
            f" entries for {n_channels} channels",
            "Give one channel object per channel of the image",
        )
    return dict(omero)


@dataclass(frozen=True)
class StoredMultiscale:
    """An image group's multiscales as stored, parsed for updates and checks.

    Parameters
    ----------
    axes : tuple of Axis
        The axes.
    paths : tuple of str
        The levels' array paths, finest first.
    scales : tuple of tuple of float
        Each level's scale transform.
    translations : tuple of tuple of float
        Each level's translation (zeros where none is stored).
    method : str or None
        The ``type`` (how levels were made), if one of shardpipe's methods.
    document : dict
        The whole ``ome`` attribute.
    """

    axes: tuple[Axis, ...]
    paths: tuple[str, ...]
    scales: tuple[tuple[float, ...], ...]
    translations: tuple[tuple[float, ...], ...]
    method: str | None
    document: dict[str, Any]

    @property
    def factors(self) -> list[tuple[int, ...]]:
        """Each level's factor relative to level 0, from the scales (rounded to integers).

        Raises
        ------
        shardpipe.errors.MetadataError
            When a ratio of scales is not a whole number.
        """
        out = []
        for scale in self.scales:
            ratios = [s / s0 for s, s0 in zip(scale, self.scales[0], strict=True)]
            rounded = tuple(round(r) for r in ratios)
            if any(
                abs(r - k) > 1e-6 * max(k, 1) or k < 1 for r, k in zip(ratios, rounded, strict=True)
            ):
                raise MetadataError(
                    f"the level scales {list(scale)} and {list(self.scales[0])} are not whole "
                    "multiples: not a pyramid shardpipe can update"
                )
            out.append(rounded)
        return out


def _vector(transforms: Any, kind: str, ndim: int, where: str) -> tuple[float, ...] | None:
    for item in transforms or ():
        if isinstance(item, Mapping) and item.get("type") == kind:
            values = item.get(kind)
            if (
                not isinstance(values, list)
                or len(values) != ndim
                or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
            ):
                raise MetadataError(f"{where}: the {kind} transform {item!r} is not {ndim} numbers")
            return tuple(float(v) for v in values)
    return None


def read_multiscale(attributes: Any, where: str) -> StoredMultiscale:
    """Parse the ``multiscales`` of an image group's attributes (its first multiscale).

    Raises
    ------
    shardpipe.errors.MetadataError
        When the attributes are not OME-Zarr 0.5 image metadata.
    """
    ome = attributes.get("ome") if isinstance(attributes, Mapping) else None
    if not isinstance(ome, Mapping) or ome.get("version") != NGFF_VERSION:
        raise MetadataError(f"{where} has no OME-Zarr {NGFF_VERSION} attributes ('ome.version')")
    entries = ome.get("multiscales")
    if not isinstance(entries, list) or not entries or not isinstance(entries[0], Mapping):
        raise MetadataError(f"{where} has no multiscales")
    entry = entries[0]
    try:
        axes = axes_from_document(entry.get("axes"), where)
    except InvalidArgumentError as err:
        raise MetadataError(str(err)) from err
    datasets = entry.get("datasets")
    if not isinstance(datasets, list) or not datasets:
        raise MetadataError(f"{where}: multiscales[0] has no datasets")
    paths, scales, translations = [], [], []
    for dataset in datasets:
        path = dataset.get("path") if isinstance(dataset, Mapping) else None
        if not isinstance(path, str) or not path:
            raise MetadataError(f"{where}: the dataset {dataset!r} has no path")
        transforms = dataset.get("coordinateTransformations")
        scale = _vector(transforms, "scale", len(axes), where)
        if scale is None:
            raise MetadataError(f"{where}: the dataset {path!r} has no scale transform")
        translation = _vector(transforms, "translation", len(axes), where)
        paths.append(path)
        scales.append(scale)
        translations.append(translation or tuple(0.0 for _ in axes))
    method = entry.get("type")
    return StoredMultiscale(
        axes,
        tuple(paths),
        tuple(scales),
        tuple(translations),
        method if isinstance(method, str) else None,
        dict(ome),
    )
