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

Pure: a checked ``.zarray`` (:func:`~shardpipe.codec.v2_array.check_zarray`)
in, JSON documents out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shardpipe.codec.v2_array import V2Array

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


def carried_codec(array: V2Array) -> CarriedCodec | None:
    """How the chunks of the checked v2 array ``array`` carry over, or None if they cannot."""
    if array.filters or array.order != "C":
        return None
    dtype = array.dtype
    endian = None if dtype.itemsize == 1 else ("big" if dtype.byteorder == ">" else "little")
    compressor = array.compressor
    if compressor is None:
        return CarriedCodec(None, endian)
    name = compressor["id"]
    if name == "zstd":
        config: dict[str, Any] = {"level": int(compressor.get("level", 0)), "checksum": False}
        if compressor.get("checksum"):
            config["checksum"] = True
        return CarriedCodec({"name": "zstd", "configuration": config}, endian)
    if name in ("gzip", "zlib"):
        level = int(compressor.get("level", 1))
        if level == -1:  # zlib's default level
            level = 6
        return CarriedCodec(
            {"name": "gzip", "configuration": {"level": level}}, endian, name == "zlib"
        )
    if name == "blosc":
        shuffle = int(compressor.get("shuffle", 1))
        if shuffle == -1:  # numcodecs' AUTOSHUFFLE: bit-shuffle single bytes, else shuffle
            shuffle = 2 if dtype.itemsize == 1 else 1
        blosc: dict[str, Any] = {
            "cname": str(compressor.get("cname", "lz4")),
            "clevel": int(compressor.get("clevel", 5)),
            "shuffle": _BLOSC_SHUFFLE[shuffle],
            "typesize": dtype.itemsize,
            "blocksize": int(compressor.get("blocksize", 0)),
        }
        return CarriedCodec({"name": "blosc", "configuration": blosc}, endian)
    return None
