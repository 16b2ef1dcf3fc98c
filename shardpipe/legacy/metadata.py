"""The metadata of the sharding storage-transformer draft, and its Zarr v3 translation.

A draft hierarchy (zarr-python 2.x, experimental v3) has an entry point
``zarr.json`` whose ``zarr_format`` is the core protocol URL, and one
document per node: ``meta/root.group.json`` or ``meta/root.array.json`` for
the root, ``meta/root/<path>.group.json`` and ``meta/root/<path>.array.json``
for the others. Its arrays keep their shards under ``data/root/<path>/``.

:func:`translate_array` turns an array's document into the ``zarr.json`` of
a Zarr v3 array sharded with ``sharding_indexed`` whose shards are the same
bytes: the inner chunks are the draft's chunks, the shard shape is
``chunk_shape * chunks_per_shard``, the index codecs are ``bytes`` (little
endian), plus ``crc32c`` when asked (the index is then followed by its
checksum). The compressor becomes the v3 codec that reads the same bytes:
``blosc``, ``gzip`` and ``zstd`` (read by every v3 reader) and ``zlib`` as
``numcodecs.zlib`` (zarr-python reads it; tensorstore has no zlib codec), or
as ``gzip`` when its chunks are to be re-wrapped (``zlib_as_gzip``).
A ``chunk_memory_layout`` of ``F`` becomes a ``transpose`` codec.

What v3 cannot say (filters, other storage transformers or extensions,
data types without a v3 name, a non-regular grid) raises
:class:`~shardpipe.errors.UnsupportedLegacyError` naming the array and the feature. Pure: JSON
in, JSON out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from shardpipe.core.grid import Coords
from shardpipe.errors import MetadataError, UnsupportedLegacyError
from shardpipe.formats.legacy_sharding import LegacyShardingFormat, legacy_format
from shardpipe.formats.zarr_sharding import ZarrShardingFormat
from shardpipe.internals.zarr_core import ArrayV3Metadata
from shardpipe.stored.metadata import parse_array_metadata

DRAFT_FORMAT = "https://purl.org/zarr/spec/protocol/core/3.0"
SHARDING = "https://purl.org/zarr/spec/storage_transformers/sharding/1.0"
CODECS = "https://purl.org/zarr/spec/codec/"
BLOSC_SHUFFLE = {0: "noshuffle", 1: "shuffle", 2: "bitshuffle"}
BLOSC_AUTOSHUFFLE = -1
"""numcodecs' default: bit shuffle for 1-byte items, byte shuffle for larger ones."""
FIX = "Read it with the tool that wrote it and write it again (shardpipe.to_sharded_zarr)"
_ARRAY_MEMBERS = {
    "attributes",
    "chunk_grid",
    "chunk_memory_layout",
    "compressor",
    "data_type",
    "dimension_separator",
    "extensions",
    "fill_value",
    "shape",
    "storage_transformers",
}


@dataclass(frozen=True)
class LegacyArray:
    """One draft array and what it becomes.

    Attributes
    ----------
    path : str
        Its path in the hierarchy (``""`` for the root).
    shard_format : LegacyShardingFormat
        How its draft shards are named and laid out.
    shard_grid : tuple of int
        Shards along each dimension.
    document : dict
        Its Zarr v3 ``zarr.json``.
    metadata : ArrayV3Metadata
        ``document`` as zarr reads it (checked when translated).
    zlib_to_gzip : bool
        Its zlib chunks become gzip members (:mod:`shardpipe.codec.zlib_rewrap`):
        the shards are rebuilt, not copied.
    """

    path: str
    shard_format: LegacyShardingFormat
    shard_grid: tuple[int, ...]
    document: dict[str, Any]
    metadata: ArrayV3Metadata
    zlib_to_gzip: bool = False

    @property
    def n_slots(self) -> int:
        """Inner chunks per shard."""
        return self.shard_format.n_slots

    def v3_key(self, shard: Coords) -> str:
        """The key of shard ``shard`` in the v3 array, relative to it (``c/0/1``)."""
        return self._v3_format.key(shard)

    @property
    def _v3_format(self) -> ZarrShardingFormat:
        fmt = self.shard_format
        return ZarrShardingFormat(fmt.chunks_per_shard, key_separator=fmt.key_separator)


def is_draft_entry_point(document: Any) -> bool:
    """Whether ``document`` (a parsed ``zarr.json``) is a draft hierarchy's entry point."""
    return isinstance(document, dict) and document.get("zarr_format") == DRAFT_FORMAT


def translate_group(document: Any, path: str = "") -> dict[str, Any]:
    """The v3 ``zarr.json`` of a draft group (its attributes kept).

    Raises
    ------
    UnsupportedLegacyError
        Naming the group, when the document is not an object or its
        attributes are not one.
    """
    if not isinstance(document, dict):
        what = f"a malformed document (a JSON {type(document).__name__}, not an object)"
        raise UnsupportedLegacyError(path, what, FIX)
    attributes = document.get("attributes", {})
    if not isinstance(attributes, dict):
        what = f"a malformed document (attributes {attributes!r:.100} are not an object)"
        raise UnsupportedLegacyError(path, what, FIX)
    return {"zarr_format": 3, "node_type": "group", "attributes": dict(attributes)}


def translate_array(
    path: str, document: dict[str, Any], *, add_crc32c: bool = False, zlib_as_gzip: bool = False
) -> LegacyArray:
    """Translate a draft array's document (see the module docstring).

    With ``zlib_as_gzip``, a zlib compressor becomes ``gzip`` (the chunks
    are to be re-wrapped, :mod:`shardpipe.codec.zlib_rewrap`) instead of
    ``numcodecs.zlib``. The v3 document is checked as zarr reads it.

    Raises
    ------
    UnsupportedLegacyError
        Naming the array and what v3 cannot express, or what is malformed
        in its document (a member missing or of the wrong type).
    """
    try:
        fmt, shard_grid, v3, rewrap = _translate(path, document, add_crc32c, zlib_as_gzip)
    except UnsupportedLegacyError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, ZeroDivisionError) as err:
        what = f"missing member {err}" if isinstance(err, KeyError) else str(err)
        raise UnsupportedLegacyError(path, f"a malformed document ({what})", FIX) from err
    try:
        metadata = parse_array_metadata(v3, f"{path or '/'} (translated)")
    except MetadataError as err:
        raise UnsupportedLegacyError(path, f"a translation zarr refuses ({err})", FIX) from err
    return LegacyArray(path, fmt, shard_grid, v3, metadata, zlib_to_gzip=rewrap)


def _translate(
    path: str, document: dict[str, Any], add_crc32c: bool, zlib_as_gzip: bool
) -> tuple[LegacyShardingFormat, tuple[int, ...], dict[str, Any], bool]:
    """The shard format, shard grid, v3 document and whether chunks are re-wrapped."""
    if unknown := sorted(set(document) - _ARRAY_MEMBERS):
        raise UnsupportedLegacyError(path, f"has members v3 has no place for: {unknown}", FIX)
    attributes = document.get("attributes", {})
    if not isinstance(attributes, dict):
        raise UnsupportedLegacyError(path, f"attributes {attributes!r:.100} are not an object", FIX)
    attributes = dict(attributes)
    if "filters" in attributes:
        ids = [f.get("id") for f in attributes["filters"] if isinstance(f, dict)]
        raise UnsupportedLegacyError(
            path, f"filters {ids} (numcodecs filters have no Zarr v3 core codec)", FIX
        )
    if document.get("extensions"):
        raise UnsupportedLegacyError(path, f"extensions {document['extensions']!r}", FIX)
    grid = document.get("chunk_grid", {})
    if grid.get("type") != "regular":
        raise UnsupportedLegacyError(path, f"chunk grid {grid.get('type')!r}", FIX)
    chunks = _whole_numbers(path, "chunk_grid.chunk_shape", grid["chunk_shape"])
    shape = _whole_numbers(path, "shape", document["shape"])
    if len(chunks) != len(shape) or min(chunks, default=1) < 1 or min(shape, default=0) < 0:
        raise UnsupportedLegacyError(path, f"chunk shape {chunks} for shape {shape}", FIX)
    per_shard = _chunks_per_shard(path, document.get("storage_transformers", []), len(shape))
    separator = str(grid.get("separator", document.get("dimension_separator", "/")))
    if separator not in ("/", "."):
        raise UnsupportedLegacyError(path, f"chunk key separator {separator!r}", FIX)
    dtype, endian = _data_type(path, document["data_type"])
    inner: list[dict[str, Any]] = []
    layout = document.get("chunk_memory_layout", "C")
    if layout == "F" and len(shape) > 1:
        inner.append(
            {"name": "transpose", "configuration": {"order": list(range(len(shape)))[::-1]}}
        )
    elif layout not in ("C", "F"):
        raise UnsupportedLegacyError(path, f"chunk_memory_layout {layout!r}", FIX)
    inner.append({"name": "bytes", "configuration": {"endian": endian}})
    rewrap = False
    if document.get("compressor") is not None:
        codec = _compressor(path, document["compressor"], np.dtype(dtype).itemsize)
        if codec["name"] == "numcodecs.zlib" and zlib_as_gzip:
            codec, rewrap = {"name": "gzip", "configuration": codec["configuration"]}, True
        inner.append(codec)
    index_codecs: list[dict[str, Any]] = [{"name": "bytes", "configuration": {"endian": "little"}}]
    if add_crc32c:
        index_codecs.append({"name": "crc32c"})
    shard_shape = [c * k for c, k in zip(chunks, per_shard, strict=True)]
    v3 = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": shape,
        "data_type": dtype,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": shard_shape}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": separator}},
        "fill_value": _fill_value(document.get("fill_value"), dtype),
        "codecs": [
            {
                "name": "sharding_indexed",
                "configuration": {
                    "chunk_shape": chunks,
                    "codecs": inner,
                    "index_codecs": index_codecs,
                    "index_location": "end",
                },
            }
        ],
        "attributes": attributes,
    }
    shard_grid = tuple(-(-n // s) for n, s in zip(shape, shard_shape, strict=True))
    return legacy_format(tuple(per_shard), separator), shard_grid, v3, rewrap


def _whole(path: str, member: str, value: Any) -> int:
    """``value`` if it is a JSON integer (not a bool, not ``10.5`` nor ``"10"``), else raise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise UnsupportedLegacyError(
            path, f"a malformed document ({member} {value!r} is not a whole number)", FIX
        )
    return value


def _whole_numbers(path: str, member: str, values: Any) -> list[int]:
    """``values`` if it is a list of JSON integers, else raise (nothing is rounded)."""
    if not isinstance(values, list):
        raise UnsupportedLegacyError(
            path, f"a malformed document ({member} {values!r} is not a list)", FIX
        )
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int):
            raise UnsupportedLegacyError(
                path,
                f"a malformed document ({member} {values!r}: {value!r} is not a whole number)",
                FIX,
            )
    return list(values)


def _chunks_per_shard(path: str, transformers: Any, ndim: int) -> list[int]:
    sharding = [t for t in transformers if t.get("extension") == SHARDING]
    others = [t.get("extension") for t in transformers if t.get("extension") != SHARDING]
    if others:
        raise UnsupportedLegacyError(path, f"storage transformers {others}", FIX)
    if not sharding:
        raise UnsupportedLegacyError(
            path, "no sharding storage transformer (an unsharded draft array)", FIX
        )
    if len(sharding) > 1:
        raise UnsupportedLegacyError(
            path, f"{len(sharding)} sharding storage transformers (shards of shards)", FIX
        )
    config = sharding[0]
    if config.get("type", "indexed") != "indexed":
        raise UnsupportedLegacyError(path, f"binary shard format {config.get('type')!r}", FIX)
    per_shard = _whole_numbers(
        path, "chunks_per_shard", config.get("configuration", {}).get("chunks_per_shard", [])
    )
    if ndim == 0 and per_shard == [1]:  # zarr-python 2.x writes [1] for a scalar array
        return []
    if len(per_shard) != ndim or min(per_shard, default=1) < 1:
        raise UnsupportedLegacyError(path, f"chunks_per_shard {per_shard} for {ndim} dims", FIX)
    return per_shard


def _data_type(path: str, name: Any) -> tuple[str, str]:
    """The v3 data type name and the ``bytes`` codec's endian.

    The draft names complex types through an extension (``{"extension":
    ".../complex-dtypes/v1.0.html", "type": "<c8", ...}``); v3 has them.
    """
    if isinstance(name, dict):
        extension = str(name.get("extension", ""))
        if "complex-dtypes" not in extension or not isinstance(name.get("type"), str):
            raise UnsupportedLegacyError(path, f"data type extension {extension!r}", FIX)
        name = name["type"]
    try:
        dtype = np.dtype(name)
    except TypeError:
        raise UnsupportedLegacyError(path, f"data type {name!r}", FIX) from None
    kinds = {"b": "bool", "i": "int", "u": "uint", "f": "float", "c": "complex"}
    if dtype.kind not in kinds:
        raise UnsupportedLegacyError(path, f"data type {name!r} has no Zarr v3 name", FIX)
    v3 = "bool" if dtype.kind == "b" else f"{kinds[dtype.kind]}{8 * dtype.itemsize}"
    return v3, "big" if dtype.byteorder == ">" else "little"


def _compressor(path: str, compressor: Any, itemsize: int) -> dict[str, Any]:
    """The v3 codec reading the bytes the draft compressor wrote."""
    codec = str(compressor.get("codec", ""))
    config = dict(compressor.get("configuration", {}))
    name = codec.removeprefix(CODECS).split("/")[0]
    if name == "blosc":
        return {
            "name": "blosc",
            "configuration": {
                "cname": config["cname"],
                "clevel": _whole(path, "blosc clevel", config["clevel"]),
                "shuffle": _blosc_shuffle(path, config.get("shuffle", 1), itemsize),
                "typesize": itemsize,
                "blocksize": _whole(path, "blosc blocksize", config.get("blocksize", 0)),
            },
        }
    if name == "gzip":
        return {
            "name": "gzip",
            "configuration": {"level": _whole(path, "gzip level", config.get("level", 5))},
        }
    if name == "zstd":
        return {
            "name": "zstd",
            "configuration": {
                "level": _whole(path, "zstd level", config.get("level", 0)),
                "checksum": bool(config.get("checksum", False)),
            },
        }
    if name == "zlib":
        level = _whole(path, "zlib level", config.get("level", 1))
        return {"name": "numcodecs.zlib", "configuration": {"level": level}}
    raise UnsupportedLegacyError(path, f"compressor {codec!r}", FIX)


def _blosc_shuffle(path: str, shuffle: Any, itemsize: int) -> str:
    """The v3 ``shuffle`` name of a numcodecs Blosc ``shuffle`` number."""
    if shuffle == BLOSC_AUTOSHUFFLE:
        return "bitshuffle" if itemsize == 1 else "shuffle"
    if shuffle not in BLOSC_SHUFFLE:
        raise UnsupportedLegacyError(path, f"blosc shuffle {shuffle!r}", FIX)
    return BLOSC_SHUFFLE[shuffle]


def _fill_value(value: Any, dtype: str) -> Any:
    """The v3 fill value (the draft's JSON is v3's, but for ``null``: zero)."""
    if value is None:
        return False if dtype == "bool" else 0
    return value
