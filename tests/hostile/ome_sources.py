"""Hostile OME-Zarr 0.4 sources (for :mod:`tests.hostile.test_hostile_ome_sources`).

:func:`documents` gives the documents of a small, valid 0.4 image (two
levels of ``yx``, ``uint16``, zstd chunks) with a label image ``mask`` (two
levels of ``uint8``, uncompressed); :func:`build` writes them and the chunk
files into a folder. Each :class:`HostileSource` of :data:`CASES` changes
one document (or one field of it) into something a converter must refuse:
wrong types, shapes that are negative, floats, bools or beyond int64, zero
chunks, unknown codecs, bad filters, orders, separators and fill values,
missing keys, dataset paths that repeat, leave the group or are too many,
malformed multiscales and axes, labels that are not lists...
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np

Documents = dict[str, Any]
"""Each document by key: a JSON value, or ``bytes`` written as they are."""

IMAGE = np.arange(256, dtype="<u2").reshape(16, 16)
MASK = (IMAGE % 3 == 0).astype("u1")
ZSTD = {"id": "zstd", "level": 1, "checksum": False}


def _zarray(shape: list[int], dtype: str, compressor: Any) -> dict[str, Any]:
    return {
        "zarr_format": 2,
        "shape": shape,
        "chunks": [8, 8],
        "dtype": dtype,
        "compressor": compressor,
        "fill_value": 0,
        "order": "C",
        "filters": None,
        "dimension_separator": "/",
    }


def _multiscales(name: str) -> list[dict[str, Any]]:
    return [
        {
            "version": "0.4",
            "name": name,
            "axes": [{"name": "y", "type": "space"}, {"name": "x", "type": "space"}],
            "datasets": [
                {
                    "path": str(level),
                    "coordinateTransformations": [{"type": "scale", "scale": [2.0**level] * 2}],
                }
                for level in range(2)
            ],
        }
    ]


def documents() -> Documents:
    """The documents of the valid image, by key."""
    group = {"zarr_format": 2}
    return {
        ".zgroup": group,
        ".zattrs": {
            "multiscales": _multiscales("image"),
            "omero": {"channels": [{"label": "only", "color": "FFFFFF"}], "version": "0.4"},
        },
        "0/.zarray": _zarray([16, 16], "<u2", ZSTD),
        "1/.zarray": _zarray([8, 8], "<u2", ZSTD),
        "labels/.zgroup": group,
        "labels/.zattrs": {"labels": ["mask"]},
        "labels/mask/.zgroup": group,
        "labels/mask/.zattrs": {
            "multiscales": _multiscales("mask"),
            "image-label": {"version": "0.4", "colors": [{"label-value": 1, "rgba": [9, 9, 9, 9]}]},
        },
        "labels/mask/0/.zarray": _zarray([16, 16], "|u1", None),
        "labels/mask/1/.zarray": _zarray([8, 8], "|u1", None),
    }


def build(root: Path, changed: Documents) -> None:
    """Write ``changed`` (the documents) and the valid image's chunk files under ``root``."""
    levels = {
        "": ([IMAGE, IMAGE[::2, ::2]], numcodecs.Zstd(level=1)),
        "labels/mask/": ([MASK, MASK[::2, ::2]], None),
    }
    for group, (arrays, codec) in levels.items():
        for level, array in enumerate(arrays):
            for i in range(0, array.shape[0], 8):
                for j in range(0, array.shape[1], 8):
                    raw = np.ascontiguousarray(array[i : i + 8, j : j + 8]).tobytes()
                    chunk = Path(root, f"{group}{level}", str(i // 8), str(j // 8))
                    chunk.parent.mkdir(parents=True, exist_ok=True)
                    chunk.write_bytes(raw if codec is None else codec.encode(raw))
    for key, document in changed.items():
        path = Path(root, key)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(document if isinstance(document, bytes) else json.dumps(document).encode())


@dataclass(frozen=True)
class HostileSource:
    """One hostile change of the valid image's documents.

    ``change`` edits the documents in place; ``names`` is what the error
    message must name (the document, and the offending value or its kind).
    """

    change: Callable[[Documents], None]
    names: tuple[str, ...]


def _set(key: str, field: str, value: Any) -> Callable[[Documents], None]:
    def change(docs: Documents) -> None:
        docs[key][field] = value

    return change


def _drop(key: str, field: str | None = None) -> Callable[[Documents], None]:
    def change(docs: Documents) -> None:
        if field is None:
            del docs[key]
        else:
            del docs[key][field]

    return change


def _raw(key: str, data: bytes) -> Callable[[Documents], None]:
    def change(docs: Documents) -> None:
        docs[key] = data

    return change


def _entry(field: str, value: Any, key: str = ".zattrs") -> Callable[[Documents], None]:
    """Set a field of the first multiscale of ``key``."""

    def change(docs: Documents) -> None:
        docs[key]["multiscales"][0][field] = value

    return change


def _paths(*paths: Any) -> Callable[[Documents], None]:
    """Make the image's datasets the valid level 0 at each of ``paths``."""

    def change(docs: Documents) -> None:
        entry = docs[".zattrs"]["multiscales"][0]
        first = entry["datasets"][0]
        entry["datasets"] = [{**first, "path": p} for p in paths]

    return change


def _datasets(value: Any) -> Callable[[Documents], None]:
    return _entry("datasets", value)


def _compressor(value: Any) -> Callable[[Documents], None]:
    return _set("0/.zarray", "compressor", value)


LEVEL = "0/.zarray"
TOO_MANY = [str(n) for n in range(10_000)]

CASES: dict[str, HostileSource] = {
    # -- the image's .zattrs -------------------------------------------------------------
    "zattrs missing": HostileSource(_drop(".zattrs"), (".zattrs",)),
    "zattrs not json": HostileSource(_raw(".zattrs", b"{multiscales"), (".zattrs", "JSON")),
    "zattrs a list": HostileSource(_raw(".zattrs", b"[1, 2]"), (".zattrs", "object")),
    "zattrs nested too deep": HostileSource(
        _raw(".zattrs", b"[" * 100_000 + b"]" * 100_000), (".zattrs",)
    ),
    "zattrs not utf-8": HostileSource(_raw(".zattrs", b'{"a": "\xff"}'), (".zattrs",)),
    "multiscales missing": HostileSource(_drop(".zattrs", "multiscales"), ("multiscales",)),
    "multiscales a string": HostileSource(
        _set(".zattrs", "multiscales", "0.4"), ("multiscales", "'0.4'")
    ),
    "multiscales empty": HostileSource(_set(".zattrs", "multiscales", []), ("multiscales",)),
    "multiscale not an object": HostileSource(
        _set(".zattrs", "multiscales", [7]), ("multiscales",)
    ),
    "version 0.3": HostileSource(_entry("version", "0.3"), (".zattrs", "'0.3'")),
    "version missing": HostileSource(_entry("version", None), (".zattrs", "None")),
    "axes missing": HostileSource(_entry("axes", None), (".zattrs", "axes")),
    "axes a string": HostileSource(_entry("axes", "yx"), (".zattrs", "axes")),
    "axes of one": HostileSource(_entry("axes", [{"name": "x", "type": "space"}]), (".zattrs",)),
    "axes repeat a name": HostileSource(
        _entry("axes", [{"name": "x", "type": "space"}] * 2), (".zattrs", "repeat")
    ),
    "axis name a number": HostileSource(
        _entry("axes", [{"name": 1, "type": "space"}, {"name": "x", "type": "space"}]),
        (".zattrs",),
    ),
    "three axes for 2-d levels": HostileSource(
        _entry("axes", [{"name": n, "type": "space"} for n in "zyx"]), (".zattrs", "3 numbers")
    ),
    "datasets missing": HostileSource(_datasets(None), (".zattrs", "datasets")),
    "datasets an object": HostileSource(_datasets({"path": "0"}), (".zattrs", "datasets")),
    "datasets empty": HostileSource(_datasets([]), (".zattrs", "datasets")),
    "dataset not an object": HostileSource(_datasets(["0"]), (".zattrs", "'0'")),
    "dataset path missing": HostileSource(
        _datasets([{"coordinateTransformations": []}]), ("path",)
    ),
    "dataset path a number": HostileSource(_paths(0), (".zattrs", "0")),
    "dataset path empty": HostileSource(_paths(""), (".zattrs", "''")),
    "dataset path absolute": HostileSource(_paths("/0"), (".zattrs", "'/0'")),
    "dataset path leaves the group": HostileSource(_paths("../0"), (".zattrs", "'../0'")),
    "dataset path with ..": HostileSource(_paths("0/../1"), (".zattrs", "'0/../1'")),
    "dataset path with .": HostileSource(_paths("./0"), (".zattrs", "'./0'")),
    "dataset path with an empty part": HostileSource(_paths("0//1"), (".zattrs", "'0//1'")),
    "dataset path with a NUL": HostileSource(_paths("0\x00"), (".zattrs",)),
    "dataset paths repeat": HostileSource(_paths("0", "0"), (".zattrs", "'0'", "more than once")),
    "one level 10,000 times": HostileSource(_paths(*["0"] * 10_000), (".zattrs", "10,000")),
    "10,000 levels": HostileSource(_paths(*TOO_MANY), (".zattrs", "10,000")),
    "dataset inside another": HostileSource(_paths("0", "0/0"), (".zattrs", "'0/0'")),
    "dataset path labels": HostileSource(_paths("labels"), (".zattrs", "'labels'")),
    "scale transform missing": HostileSource(
        _datasets([{"path": "0", "coordinateTransformations": []}]), (".zattrs", "scale")
    ),
    "scale of strings": HostileSource(
        _datasets([{"path": "0", "coordinateTransformations": [{"type": "scale", "scale": "1"}]}]),
        (".zattrs", "scale"),
    ),
    "omero a list": HostileSource(_set(".zattrs", "omero", [1]), (".zattrs", "omero")),
    # -- a level's .zarray ---------------------------------------------------------------
    "zarray missing": HostileSource(_drop(LEVEL), (LEVEL,)),
    "zarray not json": HostileSource(_raw(LEVEL, b'{"shape": [16,'), (LEVEL, "JSON")),
    "zarray a number": HostileSource(_raw(LEVEL, b"16"), (LEVEL, "object")),
    "zarr_format 3": HostileSource(_set(LEVEL, "zarr_format", 3), (LEVEL, "zarr_format", "3")),
    "shape missing": HostileSource(_drop(LEVEL, "shape"), (LEVEL, "shape")),
    "shape a string": HostileSource(_set(LEVEL, "shape", "16,16"), (LEVEL, "shape", "'16,16'")),
    "shape negative": HostileSource(_set(LEVEL, "shape", [-16, 16]), (LEVEL, "shape", "-16")),
    "shape float": HostileSource(_set(LEVEL, "shape", [64.7, 64]), (LEVEL, "shape", "64.7")),
    "shape bool": HostileSource(_set(LEVEL, "shape", [True, 16]), (LEVEL, "shape", "True")),
    "shape of strings": HostileSource(_set(LEVEL, "shape", ["16", 16]), (LEVEL, "shape", "'16'")),
    "shape beyond int64": HostileSource(
        _set(LEVEL, "shape", [2**62, 2**62]), (LEVEL, "shape", "4611686018427387904", "int64")
    ),
    "shape of 2**70": HostileSource(_set(LEVEL, "shape", [2**70, 16]), (LEVEL, "shape")),
    "shape of 2**70 by 0": HostileSource(_set(LEVEL, "shape", [2**70, 0]), (LEVEL, "int64")),
    "shape of 100,000 dimensions": HostileSource(
        _set(LEVEL, "shape", [2**62] * 100_000), (LEVEL, "shape", "at most 64")
    ),
    "shape of three for two axes": HostileSource(
        lambda d: d[LEVEL].update(shape=[1, 16, 16], chunks=[1, 8, 8]), (LEVEL, "3 dimensions")
    ),
    "chunks missing": HostileSource(_drop(LEVEL, "chunks"), (LEVEL, "chunks")),
    "chunks zero": HostileSource(_set(LEVEL, "chunks", [0, 8]), (LEVEL, "chunks", "0")),
    "chunks negative": HostileSource(_set(LEVEL, "chunks", [-8, 8]), (LEVEL, "chunks", "-8")),
    "chunks float": HostileSource(_set(LEVEL, "chunks", [8.5, 8]), (LEVEL, "chunks", "8.5")),
    "chunks of one dimension": HostileSource(_set(LEVEL, "chunks", [8]), (LEVEL, "chunks")),
    "chunks beyond int64 bytes": HostileSource(
        _set(LEVEL, "chunks", [2**62, 8]), (LEVEL, "chunks")
    ),
    "a grid of 2**60 chunks": HostileSource(
        _set(LEVEL, "shape", [2**30, 2**30]), ("'0'", LEVEL, "16,777,216")
    ),
    "dtype missing": HostileSource(_drop(LEVEL, "dtype"), (LEVEL, "dtype")),
    "dtype unknown": HostileSource(_set(LEVEL, "dtype", "<x9"), (LEVEL, "dtype", "'<x9'")),
    "dtype a number": HostileSource(_set(LEVEL, "dtype", 5), (LEVEL, "dtype", "5")),
    "dtype object": HostileSource(_set(LEVEL, "dtype", "|O"), (LEVEL, "dtype", "'|O'")),
    "dtype structured": HostileSource(
        _set(LEVEL, "dtype", [["a", "<u2"]]), (LEVEL, "dtype", "'a'")
    ),
    "dtype a string type": HostileSource(_set(LEVEL, "dtype", "<U4"), (LEVEL, "dtype", "'<U4'")),
    "fill_value a word": HostileSource(_set(LEVEL, "fill_value", "abc"), (LEVEL, "'abc'")),
    "fill_value NaN for uint16": HostileSource(_set(LEVEL, "fill_value", "NaN"), (LEVEL, "'NaN'")),
    "fill_value 1.5 for uint16": HostileSource(_set(LEVEL, "fill_value", 1.5), (LEVEL, "1.5")),
    "fill_value beyond uint16": HostileSource(_set(LEVEL, "fill_value", 70000), (LEVEL, "70000")),
    "fill_value negative for uint16": HostileSource(
        _set(LEVEL, "fill_value", -1), (LEVEL, "fill_value", "-1")
    ),
    "fill_value a list": HostileSource(_set(LEVEL, "fill_value", [0]), (LEVEL, "[0]")),
    "fill_value bool for uint16": HostileSource(_set(LEVEL, "fill_value", True), (LEVEL, "True")),
    "fill_value Foo for float32": HostileSource(
        lambda d: d[LEVEL].update(dtype="<f4", fill_value="Foo"), (LEVEL, "'Foo'")
    ),
    "fill_value 1e300 for float32": HostileSource(
        lambda d: d[LEVEL].update(dtype="<f4", fill_value=1e300), (LEVEL, "1e+300")
    ),
    "compressor unknown": HostileSource(_compressor({"id": "nope"}), (LEVEL, "'nope'")),
    "compressor pickle": HostileSource(_compressor({"id": "pickle"}), (LEVEL, "'pickle'")),
    "compressor a string": HostileSource(_compressor("zstd"), (LEVEL, "'zstd'")),
    "compressor without id": HostileSource(_compressor({"level": 1}), (LEVEL, "compressor")),
    "compressor of a wrong option": HostileSource(
        _compressor({"id": "zstd", "speed": 3}), (LEVEL, "'speed'")
    ),
    "zstd level a word": HostileSource(_compressor({"id": "zstd", "level": "high"}), (LEVEL,)),
    "zstd level 10**30": HostileSource(_compressor({"id": "zstd", "level": 10**30}), (LEVEL,)),
    "gzip level 99": HostileSource(_compressor({"id": "gzip", "level": 99}), (LEVEL, "99")),
    "zlib level 1.5": HostileSource(_compressor({"id": "zlib", "level": 1.5}), (LEVEL, "1.5")),
    "blosc cname unknown": HostileSource(
        _compressor({"id": "blosc", "cname": "nope", "clevel": 5, "shuffle": 1}), (LEVEL, "'nope'")
    ),
    "blosc shuffle 7": HostileSource(
        _compressor({"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 7}), (LEVEL, "7")
    ),
    "blosc clevel -3": HostileSource(
        _compressor({"id": "blosc", "cname": "lz4", "clevel": -3, "shuffle": 1}), (LEVEL, "-3")
    ),
    "filters a string": HostileSource(_set(LEVEL, "filters", "delta"), (LEVEL, "filters")),
    "filters 100,000 times": HostileSource(
        _set(LEVEL, "filters", [{"id": "shuffle", "elementsize": 2}] * 100_000),
        (LEVEL, "at most 16 filters"),
    ),
    "filters unknown": HostileSource(_set(LEVEL, "filters", [{"id": "nope"}]), (LEVEL, "'nope'")),
    "filter not an object": HostileSource(_set(LEVEL, "filters", [3]), (LEVEL, "filter", "3")),
    "filter of a wrong option": HostileSource(
        _set(LEVEL, "filters", [{"id": "delta", "dtype": "<u2", "size": 2}]), (LEVEL, "'size'")
    ),
    "filter of an unknown dtype": HostileSource(
        _set(LEVEL, "filters", [{"id": "delta", "dtype": "<x9"}]), (LEVEL, "'<x9'")
    ),
    "order X": HostileSource(_set(LEVEL, "order", "X"), (LEVEL, "order", "'X'")),
    "order a number": HostileSource(_set(LEVEL, "order", 1), (LEVEL, "order")),
    "separator a backslash": HostileSource(
        _set(LEVEL, "dimension_separator", "\\"), (LEVEL, "dimension_separator")
    ),
    "separator a number": HostileSource(
        _set(LEVEL, "dimension_separator", 5), (LEVEL, "dimension_separator", "5")
    ),
    "separator a word": HostileSource(
        _set(LEVEL, "dimension_separator", "../"), (LEVEL, "dimension_separator", "'../'")
    ),
    # -- labels -------------------------------------------------------------------------
    "labels not json": HostileSource(_raw("labels/.zattrs", b"{"), ("labels/.zattrs",)),
    "labels a string": HostileSource(
        _set("labels/.zattrs", "labels", "mask"), ("labels/.zattrs", "'mask'")
    ),
    "labels a list": HostileSource(_raw("labels/.zattrs", b'["mask"]'), ("labels/.zattrs",)),
    "label name a number": HostileSource(
        _set("labels/.zattrs", "labels", [1]), ("labels/.zattrs", "1")
    ),
    "label name leaves": HostileSource(
        _set("labels/.zattrs", "labels", ["../mask"]), ("labels/.zattrs", "'../mask'")
    ),
    "label name nested": HostileSource(
        _set("labels/.zattrs", "labels", ["a/b"]), ("labels/.zattrs", "'a/b'")
    ),
    "label name empty": HostileSource(
        _set("labels/.zattrs", "labels", [""]), ("labels/.zattrs", "''")
    ),
    "label names repeat": HostileSource(
        _set("labels/.zattrs", "labels", ["mask", "mask"]), ("labels/.zattrs", "more than once")
    ),
    "label group missing": HostileSource(
        _set("labels/.zattrs", "labels", ["mask", "other"]), ("labels/other/.zattrs",)
    ),
    "label level shape float": HostileSource(
        _set("labels/mask/0/.zarray", "shape", [16.5, 16]), ("labels/mask/0/.zarray", "16.5")
    ),
    "label dataset path leaves": HostileSource(
        lambda d: d["labels/mask/.zattrs"]["multiscales"][0]["datasets"][0].update(path="../../0"),
        ("labels/mask/.zattrs", "'../../0'"),
    ),
    "label image-label a list": HostileSource(
        _set("labels/mask/.zattrs", "image-label", [1]), ("labels/mask/.zattrs", "image-label")
    ),
}
"""Every hostile source, by name."""
