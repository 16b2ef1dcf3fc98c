"""A Zarr v2 array's ``.zarray``, checked field by field before any of its chunks is read.

A conversion from Zarr v2 reads documents it did not write: each field is
checked for its type and range here, so that a wrong one is refused by name
(:class:`~shardpipe.errors.InvalidArgumentError` for ``source``, naming the
document, the field, the value and what it may be) before anything is
planned or written, instead of failing as a ``ValueError`` in NumPy, zarr
or numcodecs half way through:

* ``zarr_format`` is 2; ``shape`` a list of whole numbers >= 0 (not bools,
  not floats) and ``chunks`` one of whole numbers >= 1 per dimension, whose
  elements and bytes stay within int64 (:data:`~shardpipe.core.checks.MAX_SIZE`);
* ``dtype`` a NumPy type string of booleans, integers or floats (no
  structured, object, string or time types);
* ``fill_value`` ``null``, or a value of that type that fits it;
* ``order`` ``"C"`` or ``"F"``; ``dimension_separator`` absent, ``"."`` or ``"/"``;
* ``compressor`` ``null`` or one of :data:`V2_COMPRESSORS`, ``filters``
  ``null`` or a list of :data:`V2_FILTERS`, each with the options its
  numcodecs class takes (other codecs, ``pickle`` among them, are refused:
  decoding would run them on the source's bytes).

:attr:`V2Array.stored_chunk_bound` is the most bytes a stored chunk can
hold: reads of the source stop there.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

import numcodecs  # type: ignore[import-untyped]
import numpy as np

from shardpipe.core.checks import MAX_SIZE, is_integer, shown
from shardpipe.core.grid import Shape, ceildiv
from shardpipe.errors import InvalidArgumentError

__all__ = ["V2_COMPRESSORS", "V2_FILTERS", "V2Array", "check_zarray"]

_CHECKSUMS = ("adler32", "crc32", "crc32c", "fletcher32", "jenkins_lookup3")
V2_COMPRESSORS = ("blosc", "bz2", "gzip", "lz4", "lzma", "zlib", "zstd", *_CHECKSUMS)
"""numcodecs compressors a source may use (the others decode nothing an image holds)."""
V2_FILTERS = (
    "astype",
    "bitround",
    "delta",
    "fixedscaleoffset",
    "packbits",
    "quantize",
    "shuffle",
    *_CHECKSUMS,
)
"""numcodecs filters a source may use."""
BLOSC_CNAMES = ("blosclz", "lz4", "lz4hc", "zlib", "zstd")
"""The blosc compressors numcodecs and zarr's ``blosc`` codec both have."""
MAX_NDIM = 64
"""Most dimensions an array may have (NumPy's limit)."""
MAX_FILTERS = 16
"""Most filters an array may have (each is one more pass over every chunk)."""
_LEVELS = {"gzip": (0, 9), "zlib": (-1, 9), "zstd": (-(1 << 17), 22)}
_DTYPE_OPTIONS = ("astype", "decode_dtype", "dtype", "encode_dtype")
_FLOAT_WORDS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_CODEC_ERRORS = (TypeError, ValueError, KeyError, AttributeError, OverflowError, RuntimeError)
_STAGE_SLACK = (1 + 1 / 128, 1024)
"""A codec stage's most encoded bytes: 1/128 more, plus 1 KiB (as ``ChunkCodec.expansion``)."""


@dataclass(frozen=True)
class V2Array:
    """A checked ``.zarray``.

    Parameters
    ----------
    shape, chunks : tuple of int
        The array's shape and chunk shape.
    dtype : numpy.dtype
        Its data type (booleans, integers or floats, either byte order).
    fill_value : bool, int or float
        Its fill value, as a Zarr v3 array takes it (``null``: 0).
    order : {"C", "F"}
        The order of a chunk's elements.
    separator : {".", "/"}
        The chunk keys' ``dimension_separator``.
    compressor : dict or None
        The numcodecs configuration of the compressor.
    filters : tuple of dict
        Those of the filters.
    widest : int
        The largest item size along the filters (they may widen the type).
    """

    shape: Shape
    chunks: Shape
    dtype: np.dtype[Any]
    fill_value: bool | int | float
    order: str
    separator: str
    compressor: dict[str, Any] | None
    filters: tuple[dict[str, Any], ...]
    widest: int

    @property
    def n_chunks(self) -> int:
        """Chunks of the array's grid (stored or not)."""
        return math.prod(ceildiv(n, c) for n, c in zip(self.shape, self.chunks, strict=True))

    @property
    def stored_chunk_bound(self) -> int:
        """Most bytes a stored chunk can hold.

        A chunk's elements (at the widest item size of its filters), each
        codec allowed 1/128 more bytes plus 1 KiB, the bound
        :attr:`~shardpipe.codec.chunk_codec.ChunkCodec.expansion` sets on
        zstd, gzip and blosc on incompressible data. Without codecs: exactly
        the chunk's bytes.
        """
        stages = len(self.filters) + (self.compressor is not None)
        factor, extra = _STAGE_SLACK
        elements = math.prod(self.chunks)
        return int(elements * self.widest * factor**stages) + extra * stages


def check_zarray(document: Mapping[str, Any], where: str) -> V2Array:
    """Check the ``.zarray`` ``document`` of the array at ``where``.

    Parameters
    ----------
    document : Mapping
        The parsed ``.zarray``.
    where : str
        The document's key, as messages name it (``"0/.zarray"``).

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        Naming ``source``, ``where``, the field, its value and what it may be.
    """
    if document.get("zarr_format") != 2 or isinstance(document.get("zarr_format"), bool):
        _refuse(where, "zarr_format", document.get("zarr_format"), "2 (a Zarr v2 array)")
    shape = _sizes(document, "shape", where, 0, "a list of whole numbers >= 0")
    chunks = _sizes(document, "chunks", where, 1, "a list of whole numbers >= 1")
    if len(chunks) != len(shape):
        _refuse(where, "chunks", list(chunks), f"one size per dimension of the shape {list(shape)}")
    dtype = _dtype(document.get("dtype"), where)
    for name, sizes in (("shape", shape), ("chunks", chunks)):
        total = math.prod(sizes) * dtype.itemsize
        if max(sizes) > MAX_SIZE or total > MAX_SIZE:
            what = f"the size {max(sizes):,}" if max(sizes) > MAX_SIZE else f"{total:,} bytes"
            raise InvalidArgumentError(
                "source",
                f"{where}: {name} {list(sizes)} of {dtype} has {what}, beyond int64 (2**63 - 1 = "
                f"{MAX_SIZE:,}), which NumPy, Dask and zarr index with",
                f"Repair {where} of the source: its {name} is wrong",
            )
    order = document.get("order", "C")
    if order not in ("C", "F") or not isinstance(order, str):
        _refuse(where, "order", order, "'C' or 'F'")
    separator = document.get("dimension_separator", ".")
    if separator is None:
        separator = "."
    if separator not in (".", "/") or not isinstance(separator, str):
        _refuse(where, "dimension_separator", separator, "'.' or '/'")
    filters = document.get("filters")
    if filters is not None and (not isinstance(filters, list) or len(filters) > MAX_FILTERS):
        _refuse(
            where,
            "filters",
            filters,
            f"null or a list of at most {MAX_FILTERS} filters ({', '.join(V2_FILTERS)})",
        )
    checked = tuple(_codec(f, "filter", V2_FILTERS, where) for f in filters or ())
    compressor = document.get("compressor")
    if compressor is not None:
        compressor = _codec(compressor, "compressor", V2_COMPRESSORS, where)
        _check_carried_options(compressor, where)
    widest = max([dtype.itemsize, *(_widened(f, where) for f in checked)])
    fill = _fill_value(document.get("fill_value"), dtype, where)
    return V2Array(shape, chunks, dtype, fill, order, separator, compressor, checked, widest)


def _refuse(where: str, field: str, value: Any, expected: str) -> NoReturn:
    raise InvalidArgumentError(
        "source",
        f"{where}: {field} is {shown(value)}, not {expected}",
        f"Repair {where} of the source (a Zarr v2 array's metadata), or rewrite that array "
        "with zarr",
    )


def _sizes(document: Mapping[str, Any], field: str, where: str, least: int, what: str) -> Shape:
    value = document.get(field)
    if not isinstance(value, list) or not value or len(value) > MAX_NDIM:
        _refuse(where, field, value, f"{what}, at most {MAX_NDIM} of them")
    wrong = [v for v in value if not is_integer(v) or v < least]
    if wrong:
        raise InvalidArgumentError(
            "source",
            f"{where}: {field} {value!r:.200} holds {shown(wrong[0])}, not a whole number "
            f">= {least}",
            f"Repair {where} of the source: {field} is {what}",
        )
    return tuple(int(v) for v in value)


def _dtype(value: Any, where: str) -> np.dtype[Any]:
    expected = "a NumPy type string of booleans, integers or floats such as '<u2'"
    if not isinstance(value, str):
        _refuse(where, "dtype", value, expected)
    try:
        dtype = np.dtype(value)
    except (TypeError, ValueError, SyntaxError):
        _refuse(where, "dtype", value, expected)
    if dtype.kind not in "biuf" or dtype.fields is not None or dtype.subdtype is not None:
        _refuse(where, "dtype", value, expected)
    return dtype


def _codec(config: Any, field: str, known: tuple[str, ...], where: str) -> dict[str, Any]:
    """A compressor's or filter's configuration, checked by making the numcodecs codec."""
    if not isinstance(config, Mapping) or not isinstance(config.get("id"), str):
        _refuse(where, field, config, "a codec object with an 'id'")
    name = config["id"]
    if name not in known:
        raise InvalidArgumentError(
            "source",
            f"{where}: the {field} {name!r} is not one a conversion decodes ({', '.join(known)})",
            f"Rewrite that array of the source with zarr and one of those codecs ({name!r} "
            "may not be run on bytes that are not trusted, or holds no image)",
        )
    try:
        numcodecs.get_codec(dict(config))
    except _CODEC_ERRORS as err:
        raise InvalidArgumentError(
            "source",
            f"{where}: the {field} {dict(config)!r:.200} is not a valid {name} configuration "
            f"({err})",
            f"Repair {where} of the source: give the {name} codec the options numcodecs takes",
        ) from None
    return dict(config)


def _check_carried_options(config: dict[str, Any], where: str) -> None:
    """Range-check the options a conversion carries into Zarr v3 metadata."""
    name = config["id"]
    if name in _LEVELS:
        least, most = _LEVELS[name]
        _option(config, "level", least, most, where)
        if name == "zstd" and not isinstance(config.get("checksum", False), bool):
            _refuse(where, "the zstd checksum", config["checksum"], "true or false")
    elif name == "blosc":
        if config.get("cname", "lz4") not in BLOSC_CNAMES:
            _refuse(where, "the blosc cname", config.get("cname"), f"one of {BLOSC_CNAMES}")
        _option(config, "clevel", 0, 9, where)
        _option(config, "shuffle", -1, 2, where)
        _option(config, "blocksize", 0, 2**31 - 1, where)


def _option(config: dict[str, Any], key: str, least: int, most: int, where: str) -> None:
    if key in config and (not is_integer(config[key]) or not least <= config[key] <= most):
        _refuse(
            where, f"the {config['id']} {key}", config[key], f"a whole number in [{least}, {most}]"
        )


def _widened(config: dict[str, Any], where: str) -> int:
    """The largest item size a filter's options name (its encoded type may be wider)."""
    sizes = [1]
    for key in _DTYPE_OPTIONS:
        if key in config:
            sizes.append(_dtype(config[key], where).itemsize)
    return max(sizes)


def _fill_value(value: Any, dtype: np.dtype[Any], where: str) -> bool | int | float:
    if value is None:
        return 0
    expected = {"b": "true or false", "i": "an integer", "u": "an integer"}.get(
        dtype.kind, "a number, 'NaN', 'Infinity' or '-Infinity'"
    )
    if dtype.kind == "b":
        if not isinstance(value, bool):
            _refuse(where, "fill_value", value, f"{expected} for {dtype}")
        return bool(value)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        if not is_integer(value) or not info.min <= value <= info.max:
            _refuse(where, "fill_value", value, f"{expected} in [{info.min}, {info.max}]")
        return int(value)
    if isinstance(value, str) and value in _FLOAT_WORDS:
        return _FLOAT_WORDS[value]
    finite = float(np.finfo(dtype).max)
    if not isinstance(value, int | float) or isinstance(value, bool) or abs(value) > finite:
        _refuse(where, "fill_value", value, f"{expected} within the range of {dtype}")
    return float(value)
