"""What an OME-Zarr 0.4 source holds: its documents, labels, codecs and fill values.

The reading side of :mod:`shardpipe.ome.convert`: the ``.zattrs``/``.zarray``
documents of a Zarr v2 image, translated into what the 0.5 image needs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from shardpipe.codec.v2_carry import CarriedCodec
from shardpipe.core.checks import shown
from shardpipe.core.documents import parse_json_object
from shardpipe.errors import InvalidArgumentError, MetadataError
from shardpipe.ome.metadata import NGFF_VERSION
from shardpipe.ome.source_reads import DOCUMENT, MAX_DOCUMENT_NBYTES, read_at_most
from shardpipe.storage.resolve import ResolvedStore
from shardpipe.stored.locations import resolved_name

SOURCE_VERSION = "0.4"
"""The OME-Zarr version this converts from."""
REPAIR = "Repair the source's metadata (OME-Zarr 0.4, Zarr v2)"
"""The fix an error about a source's documents gives."""


def codec_name(carried: CarriedCodec | None) -> str:
    if carried is None or carried.compressor is None:
        return "uncompressed"
    name = str(carried.compressor["name"])
    return "zlib re-wrapped as gzip" if carried.rewrap_zlib else name


def fill_value_of(zarray: Mapping[str, Any], dtype: np.dtype[Any]) -> Any:
    fill = zarray.get("fill_value")
    if fill is None:
        return 0
    if isinstance(fill, str) and dtype.kind == "f":
        return {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}[fill]
    return fill


def read_json(source: ResolvedStore, key: str, what: str) -> dict[str, Any]:
    """The JSON object at ``key`` of the source (read only if at most 16 MiB).

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        Naming ``source`` and ``key``, when it is absent, larger, not JSON or
        not an object.
    """
    data = read_at_most(source.shards, source.key(key), MAX_DOCUMENT_NBYTES, DOCUMENT)
    if data is None:
        raise InvalidArgumentError(
            "source",
            f"{what} has no {key} at {resolved_name(source)}",
            f"Point at an OME-Zarr {SOURCE_VERSION} image (a Zarr v2 group with multiscales)",
        )
    try:
        return parse_json_object(data, repr(source.key(key)))
    except MetadataError as err:
        raise InvalidArgumentError("source", str(err), f"Repair {key} of the source") from None


def translate_image(attributes: dict[str, Any], where: str) -> tuple[dict[str, Any], list[str]]:
    """The 0.5 ``ome`` attribute of a 0.4 image (or label image) group, and its level paths.

    ``where`` is the group's ``.zattrs`` key, as messages name it. The
    document's structure is checked (objects where objects go, a dataset
    path per dataset); :func:`shardpipe.ome.v04_checks.validate_source`
    checks the rest.
    """
    entries = attributes.get("multiscales")
    if not isinstance(entries, list) or not entries or not isinstance(entries[0], dict):
        raise InvalidArgumentError(
            "source",
            f"{where} has no multiscales (a list of objects), got {shown(entries)}",
            "Point at an OME-Zarr 0.4 image group",
        )
    version = entries[0].get("version")
    if version != SOURCE_VERSION:
        raise InvalidArgumentError(
            "source",
            f"{where} is OME-Zarr {version!r}, not {SOURCE_VERSION}",
            "Convert OME-Zarr 0.4 images (a 0.5 image needs no conversion)",
        )
    for name, value in [*(("multiscales", e) for e in entries), *_objects(attributes)]:
        if not isinstance(value, dict):
            raise InvalidArgumentError(
                "source", f"{where}: {name} is {shown(value)}, not an object", REPAIR
            )
    multiscales = []
    for entry in entries:
        kept = {k: v for k, v in entry.items() if k != "version"}
        multiscales.append(kept)
    ome: dict[str, Any] = {"version": NGFF_VERSION, "multiscales": multiscales}
    for name, value in _objects(attributes):
        ome[name] = {k: v for k, v in value.items() if k != "version"}
    datasets = entries[0].get("datasets")
    if not isinstance(datasets, list) or not datasets:
        raise InvalidArgumentError(
            "source", f"{where} has no datasets (a list of objects), got {shown(datasets)}", REPAIR
        )
    paths = []
    for dataset in datasets:
        path = dataset.get("path") if isinstance(dataset, dict) else None
        if not isinstance(path, str):
            raise InvalidArgumentError(
                "source", f"{where}: the dataset {dataset!r:.100} has no path (a string)", REPAIR
            )
        paths.append(path)
    return ome, paths


def _objects(attributes: dict[str, Any]) -> list[tuple[str, Any]]:
    """The members of a group's attributes the 0.5 image keeps besides multiscales."""
    return [(name, attributes[name]) for name in ("omero", "image-label") if name in attributes]


def labels_of(src: ResolvedStore) -> list[str]:
    """The names ``labels/.zattrs`` lists (none without it); each a string."""
    if src.shards.size(src.key("labels/.zattrs")) is None:
        return []
    names = read_json(src, "labels/.zattrs", "the labels group").get("labels", [])
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise InvalidArgumentError(
            "source",
            f"labels/.zattrs: labels is {shown(names)}, not a list of label image names",
            REPAIR,
        )
    return names
