"""The ``info`` file of a Neuroglancer precomputed volume, read as untrusted bytes.

``verify`` and ``info`` compute with what an ``info`` file says (the chunk
grid of each scale, where its files are, how its shards are laid out), and
anyone may have written it. :func:`parse_info` checks every member it uses
before anything is computed, the way :mod:`shardpipe.stored.metadata` checks
``zarr.json``, and turns the document into a :class:`VolumeInfo` or raises
:class:`~shardpipe.errors.MetadataError` naming the file, the member, its
value and what is allowed:

* ``@type`` ``"neuroglancer_multiscale_volume"`` (or absent, as cloud-volume
  writes it), ``type`` ``"image"`` or ``"segmentation"``, ``data_type`` one
  of :data:`DATA_TYPES`, ``num_channels`` a positive integer;
* ``scales`` a list of 1 to :data:`MAX_SCALES` objects, each with a
  ``key`` that is a relative key inside the volume
  (:func:`~shardpipe.core.keys.checked_key`: no ``..``, no absolute path;
  :class:`~shardpipe.errors.UnsafeKeyError` otherwise) and unique, ``size``
  and every ``chunk_sizes`` entry three integers in ``[1, 2**53]``,
  ``voxel_offset`` three integers in ``[-2**53, 2**53]`` (absent: zeros),
  ``resolution`` three positive finite numbers, ``encoding`` one of
  :data:`CHUNK_ENCODINGS` (``compressed_segmentation`` with a
  ``compressed_segmentation_block_size`` of three positive integers), and
  ``sharding`` absent, ``null`` or a valid ``neuroglancer_uint64_sharded_v1``
  object (:class:`~shardpipe.formats.precomputed.PrecomputedSharding`);
* integers are JSON integers: ``64.5``, ``64.0``, ``true`` and ``"64"`` are
  refused. ``2**53`` is the largest integer Neuroglancer, a JavaScript
  program, reads exactly.

Limits, so that no ``info`` file can make a check run out of memory:

* a chunk's decoded bytes (all channels; its box clipped to the scale's
  size) at most :data:`MAX_CHUNK_NBYTES` (256 MiB; a viewer decodes whole
  chunks): every decompression of a chunk is bounded by what its box holds;
* the chunk ids of a scale fit 64 bits, as the format stores them (a grid
  of at most ``2**64`` chunks). ``verify`` and ``info`` never enumerate a
  grid: they list the files present and read what those files list, so
  their memory follows the largest shard file, never the chunk count.

Members shardpipe does not use (``mesh``, ``skeletons``, ``hidden``...) are
left alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardpipe.core.documents import parse_json_object
from shardpipe.core.keys import checked_key
from shardpipe.core.morton import morton_bit_dims
from shardpipe.core.precomputed_plan import ScaleGrid
from shardpipe.errors import InvalidArgumentError, MetadataError
from shardpipe.formats.precomputed import PrecomputedSharding

VOLUME_TYPE = "neuroglancer_multiscale_volume"
VOLUME_KINDS = ("image", "segmentation")
DATA_TYPES = ("uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "float32")
"""The data types of the precomputed format."""

CHUNK_ENCODINGS = ("raw", "jpeg", "png", "compressed_segmentation", "compresso", "jxl")
"""The chunk encodings of the format; ``verify`` decodes ``raw``, ``jpeg`` and
``compressed_segmentation`` (see :mod:`shardpipe.formats.precomputed_chunks`)."""

MAX_INFO_NBYTES = 16 << 20
"""Largest ``info`` file read (16 MiB; a volume's is a few KB)."""

MAX_SCALES = 64
MAX_EXTENT = 2**53
"""Largest voxel count or offset along a dimension: JavaScript's largest exact integer."""

MAX_CHUNK_NBYTES = 2**28
"""Most bytes a chunk may hold decoded, all channels (256 MiB)."""

MAX_ID_BITS = 64
"""Chunk ids are stored as uint64."""


@dataclass(frozen=True)
class ScaleInfo:
    """One checked scale of an ``info`` file.

    Attributes
    ----------
    key : str
        The scale's directory, relative to the volume.
    size, chunk_size, voxel_offset : tuple of int
        Voxels along x, y, z; voxels per chunk (the first ``chunk_sizes``
        entry); where the scale starts.
    resolution : tuple of float
        Nanometres per voxel.
    encoding : str
        Chunk encoding.
    sharding : PrecomputedSharding or None
        Its sharding spec (None: one file per chunk).
    block_size : tuple of int or None
        ``compressed_segmentation_block_size``.
    """

    key: str
    size: tuple[int, ...]
    chunk_size: tuple[int, ...]
    voxel_offset: tuple[int, ...]
    resolution: tuple[float, ...]
    encoding: str
    sharding: PrecomputedSharding | None
    block_size: tuple[int, ...] | None = None

    @property
    def grid(self) -> ScaleGrid:
        """The scale's chunk grid."""
        return ScaleGrid(self.size, self.chunk_size)


@dataclass(frozen=True)
class VolumeInfo:
    """A checked ``info`` file of a multiscale volume.

    Attributes
    ----------
    key : str
        Where the file is (for messages).
    volume_type : str
        ``"image"`` or ``"segmentation"``.
    data_type : str
        One of :data:`DATA_TYPES`.
    num_channels : int
        Channels per voxel.
    scales : tuple of ScaleInfo
        The scales, in the file's order.
    """

    key: str
    volume_type: str
    data_type: str
    num_channels: int
    scales: tuple[ScaleInfo, ...]

    @property
    def dtype(self) -> np.dtype[Any]:
        """The voxels' NumPy data type."""
        return np.dtype(self.data_type)


def parse_info(data: bytes, key: str) -> VolumeInfo | None:
    """Check and read the bytes of an ``info`` file.

    Parameters
    ----------
    data : bytes
        The stored bytes.
    key : str
        The file's key, as messages name it.

    Returns
    -------
    VolumeInfo or None
        None when the bytes are no precomputed ``info`` at all: not JSON, or
        not an object with ``@type``, ``scales`` or ``data_type`` (then the
        folder is left to the other formats).

    Raises
    ------
    shardpipe.errors.MetadataError
        Naming ``key``, the member, its value and what is allowed.
    shardpipe.errors.UnsafeKeyError
        If a scale's key would lead outside the volume.
    """
    if len(data) > MAX_INFO_NBYTES:
        raise MetadataError(
            f"{key!r} has {len(data):,} bytes, more than the {MAX_INFO_NBYTES:,} an info file "
            "may have"
        )
    try:
        document = parse_json_object(data, repr(key))
    except MetadataError:
        return None
    if not any(name in document for name in ("@type", "scales", "data_type")):
        return None
    return _Checker(key).volume(document)


def _show(value: Any) -> str:
    """A value as a message shows it: its repr, cut at 80 characters."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class _Checker:
    """The checks of one ``info`` file, whose key every message names."""

    def __init__(self, key: str) -> None:
        self.key = key

    def fail(self, member: str, value: Any, allowed: str) -> MetadataError:
        return MetadataError(f"{self.key!r}: {member} is {_show(value)}; {allowed}")

    def member(self, document: dict[str, Any], name: str, where: str = "") -> Any:
        if name not in document:
            raise MetadataError(f"{self.key!r}: {where}{name} is missing")
        return document[name]

    def volume(self, document: dict[str, Any]) -> VolumeInfo:
        kind = document.get("@type", VOLUME_TYPE)
        if kind != VOLUME_TYPE:
            raise self.fail("@type", kind, f"shardpipe reads {VOLUME_TYPE!r} info files")
        volume_type = self.member(document, "type")
        if volume_type not in VOLUME_KINDS:
            raise self.fail("type", volume_type, f"expected one of {VOLUME_KINDS}")
        data_type = self.member(document, "data_type")
        if data_type not in DATA_TYPES:
            raise self.fail("data_type", data_type, f"expected one of {DATA_TYPES}")
        channels = self.member(document, "num_channels")
        if not _is_int(channels) or channels < 1:
            raise self.fail("num_channels", channels, "expected a positive integer")
        scales = self.member(document, "scales")
        if not isinstance(scales, list) or not 1 <= len(scales) <= MAX_SCALES:
            raise self.fail("scales", scales, f"expected a list of 1 to {MAX_SCALES} scales")
        itemsize = np.dtype(data_type).itemsize
        checked: list[ScaleInfo] = []
        for i, scale in enumerate(scales):
            one = self.scale(scale, f"scales[{i}]", channels * itemsize)
            if any(s.key == one.key for s in checked):
                raise self.fail(f"scales[{i}].key", one.key, "another scale has that key")
            checked.append(one)
        return VolumeInfo(self.key, str(volume_type), str(data_type), channels, tuple(checked))

    def scale(self, scale: Any, where: str, voxel_nbytes: int) -> ScaleInfo:
        if not isinstance(scale, dict):
            raise self.fail(where, scale, "expected an object")
        key = self.member(scale, "key", f"{where}.")
        if not isinstance(key, str):
            raise self.fail(f"{where}.key", key, "expected a relative key (a string)")
        checked_key(key, f"{self.key} {where}.key")
        size = self.ints(scale, "size", where, least=1)
        sizes = self.member(scale, "chunk_sizes", f"{where}.")
        if not isinstance(sizes, list) or not sizes:
            raise self.fail(f"{where}.chunk_sizes", sizes, "expected a list of [x, y, z] sizes")
        chunk_sizes = [self.triple(s, f"{where}.chunk_sizes[{j}]", 1) for j, s in enumerate(sizes)]
        for j, chunk in enumerate(chunk_sizes):  # edge chunks are stored clipped to the size
            nbytes = math.prod(min(c, n) for c, n in zip(chunk, size, strict=True)) * voxel_nbytes
            if nbytes > MAX_CHUNK_NBYTES:
                raise self.fail(
                    f"{where}.chunk_sizes[{j}]",
                    list(chunk),
                    f"a chunk would hold {nbytes:,} bytes decoded, more than the "
                    f"{MAX_CHUNK_NBYTES:,} shardpipe decodes",
                )
        offset: tuple[int, ...] = (0, 0, 0)
        if scale.get("voxel_offset") is not None:
            offset = self.ints(scale, "voxel_offset", where, least=-MAX_EXTENT)
        resolution = self.member(scale, "resolution", f"{where}.")
        if (
            not isinstance(resolution, list)
            or len(resolution) != 3
            or not all(
                isinstance(r, int | float) and not isinstance(r, bool) and 0 < r < math.inf
                for r in resolution
            )
        ):
            raise self.fail(f"{where}.resolution", resolution, "expected three positive numbers")
        encoding = self.member(scale, "encoding", f"{where}.")
        if encoding not in CHUNK_ENCODINGS:
            raise self.fail(f"{where}.encoding", encoding, f"expected one of {CHUNK_ENCODINGS}")
        block = None
        if encoding == "compressed_segmentation":
            member = "compressed_segmentation_block_size"
            block = self.triple(self.member(scale, member, f"{where}."), f"{where}.{member}", 1)
        sharding = self.sharding(scale.get("sharding"), f"{where}.sharding")
        grid = ScaleGrid(size, chunk_sizes[0])
        bits = len(morton_bit_dims(grid.grid))
        if bits > MAX_ID_BITS:
            raise self.fail(
                f"{where}.size",
                list(size),
                f"in chunks of {list(chunk_sizes[0])} its grid {list(grid.grid)} needs chunk "
                f"ids of {bits} bits; the format's ids have {MAX_ID_BITS}",
            )
        return ScaleInfo(
            key,
            size,
            chunk_sizes[0],
            offset,
            tuple(float(r) for r in resolution),
            str(encoding),
            sharding,
            block,
        )

    def ints(self, scale: dict[str, Any], name: str, where: str, *, least: int) -> tuple[int, ...]:
        return self.triple(self.member(scale, name, f"{where}."), f"{where}.{name}", least)

    def triple(self, value: Any, member: str, least: int) -> tuple[int, ...]:
        if (
            not isinstance(value, list)
            or len(value) != 3
            or not all(_is_int(v) and least <= v <= MAX_EXTENT for v in value)
        ):
            low = "1" if least == 1 else "-2**53"
            raise self.fail(member, value, f"expected three integers in [{low}, 2**53]")
        return tuple(value)

    def sharding(self, value: Any, member: str) -> PrecomputedSharding | None:
        if value is None:
            return None
        try:
            return PrecomputedSharding.from_json(value)
        except InvalidArgumentError as err:
            raise MetadataError(
                f"{self.key!r}: {member} is not a valid sharding spec: {err.problem}"
            ) from None
