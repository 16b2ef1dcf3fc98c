"""What an OME-Zarr 0.4 source holds: its documents, labels, codecs and fill values.

The reading side of :mod:`shardpipe.ome.convert`: the ``.zattrs``/``.zarray``
documents of a Zarr v2 image, translated into what the 0.5 image needs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from shardpipe.codec.v2_carry import CarriedCodec
from shardpipe.errors import InvalidArgumentError
from shardpipe.ome.metadata import NGFF_VERSION
from shardpipe.storage.resolve import ResolvedStore

SOURCE_VERSION = "0.4"
"""The OME-Zarr version this converts from."""


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
    data = source.shards.get(source.key(key))
    if data is None:
        raise InvalidArgumentError(
            "source",
            f"{what} has no {key} at {source.zarr_store}",
            f"Point at an OME-Zarr {SOURCE_VERSION} image (a Zarr v2 group with multiscales)",
        )
    try:
        document = json.loads(data)
    except ValueError as err:
        raise InvalidArgumentError(
            "source", f"{source.key(key)} is not JSON ({err})", "Repair the source"
        ) from err
    if not isinstance(document, dict):
        raise InvalidArgumentError(
            "source", f"{source.key(key)} is not a JSON object", "Repair the source"
        )
    return document


def translate_image(attributes: dict[str, Any], where: str) -> tuple[dict[str, Any], list[str]]:
    """The 0.5 ``ome`` attribute of a 0.4 image (or label image) group, and its level paths."""
    entries = attributes.get("multiscales")
    if not isinstance(entries, list) or not entries or not isinstance(entries[0], dict):
        raise InvalidArgumentError(
            "source", f"{where} has no multiscales", "Point at an OME-Zarr 0.4 image group"
        )
    version = entries[0].get("version")
    if version != SOURCE_VERSION:
        raise InvalidArgumentError(
            "source",
            f"{where} is OME-Zarr {version!r}, not {SOURCE_VERSION}",
            "Convert OME-Zarr 0.4 images (a 0.5 image needs no conversion)",
        )
    multiscales = []
    for entry in entries:
        kept = {k: v for k, v in entry.items() if k != "version"}
        multiscales.append(kept)
    ome: dict[str, Any] = {"version": NGFF_VERSION, "multiscales": multiscales}
    if "omero" in attributes:
        omero = attributes["omero"]
        ome["omero"] = (
            {k: v for k, v in omero.items() if k != "version"} if isinstance(omero, dict) else omero
        )
    if "image-label" in attributes:
        label = attributes["image-label"]
        if isinstance(label, dict):
            label = {k: v for k, v in label.items() if k != "version"}
        ome["image-label"] = label
    datasets = entries[0].get("datasets")
    if not isinstance(datasets, list):
        raise InvalidArgumentError("source", f"{where} has no datasets", "Repair the source")
    paths = [d.get("path") for d in datasets if isinstance(d, dict)]
    if len(paths) != len(datasets) or not all(isinstance(p, str) and p for p in paths):
        raise InvalidArgumentError("source", f"{where}: a dataset has no path", "Repair the source")
    return ome, [str(p) for p in paths]


def labels_of(src: ResolvedStore) -> list[str]:
    data = src.shards.get(src.key("labels/.zattrs"))
    if data is None:
        return []
    try:
        names = json.loads(data).get("labels", [])
    except (ValueError, AttributeError):
        names = None
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        raise InvalidArgumentError(
            "source", "labels/.zattrs has no list of label names", "Repair the source"
        )
    return names
