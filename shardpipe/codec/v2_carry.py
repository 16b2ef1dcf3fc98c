"""Which Zarr v2 chunks can become Zarr v3 inner chunks byte for byte, and with which codec.

A Zarr v2 chunk is its C-ordered elements, through the array's filters,
through its compressor. When there are no filters, the order is C and the
compressor is one Zarr v3 has (``blosc``, ``zstd``, ``gzip``, or none), the
compressed bytes are already a valid v3 inner chunk of the chain ``bytes``
(the dtype's byte order) then that compressor: a conversion to a sharded
array copies them into shards without decoding them. A ``zlib`` chunk is
re-wrapped as a gzip member (:mod:`shardpipe.codec.zlib_rewrap`: the
DEFLATE data is kept, not recompressed). Anything else is decoded and
encoded again.

Pure: JSON documents in, JSON documents out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["CarriedCodec", "carried_codec"]

_BLOSC_SHUFFLE = {0: "noshuffle", 1: "shuffle", 2: "bitshuffle"}


@dataclass(frozen=True)
class CarriedCodec:
    """How v2 chunks carry over to v3 inner chunks unchanged.

    Parameters
    ----------
    compressor : dict or None
        The v3 codec (``{"name": ..., "configuration": ...}``) the bytes are
        compressed with, or None for uncompressed chunks.
    endian : {"little", "big"} or None
        Byte order of the ``bytes`` codec (None for one-byte types).
    rewrap_zlib : bool
        Each chunk is a zlib stream to re-wrap as a gzip member.
    """

    compressor: dict[str, Any] | None
    endian: str | None
    rewrap_zlib: bool = False


def carried_codec(zarray: Mapping[str, Any]) -> CarriedCodec | None:
    """How the chunks of the v2 array described by ``zarray`` carry over, or None if they cannot.

    ``zarray`` is the array's ``.zarray`` document.
    """
    if zarray.get("filters") not in (None, []) or zarray.get("order", "C") != "C":
        return None
    try:
        dtype = np.dtype(zarray.get("dtype"))
    except (TypeError, ValueError):
        return None
    if dtype.kind not in "biuf" or dtype.fields is not None or dtype.subdtype is not None:
        return None
    endian = None if dtype.itemsize == 1 else ("big" if dtype.byteorder == ">" else "little")
    compressor = zarray.get("compressor")
    if compressor is None:
        return CarriedCodec(None, endian)
    if not isinstance(compressor, Mapping):
        return None
    name = compressor.get("id")
    if name == "zstd":
        config: dict[str, Any] = {"level": int(compressor.get("level", 0)), "checksum": False}
        if compressor.get("checksum"):
            config["checksum"] = True
        return CarriedCodec({"name": "zstd", "configuration": config}, endian)
    if name == "gzip":
        level = int(compressor.get("level", 1))
        return CarriedCodec({"name": "gzip", "configuration": {"level": level}}, endian)
    if name == "zlib":
        level = int(compressor.get("level", 1))
        return CarriedCodec({"name": "gzip", "configuration": {"level": level}}, endian, True)
    if name == "blosc":
        shuffle = int(compressor.get("shuffle", 1))
        if shuffle == -1:  # numcodecs' AUTOSHUFFLE: bit-shuffle single bytes, else shuffle
            shuffle = 2 if dtype.itemsize == 1 else 1
        if shuffle not in _BLOSC_SHUFFLE:
            return None
        blosc: dict[str, Any] = {
            "cname": str(compressor.get("cname", "lz4")),
            "clevel": int(compressor.get("clevel", 5)),
            "shuffle": _BLOSC_SHUFFLE[shuffle],
            "typesize": dtype.itemsize,
            "blocksize": int(compressor.get("blocksize", 0)),
        }
        return CarriedCodec({"name": "blosc", "configuration": blosc}, endian)
    return None
