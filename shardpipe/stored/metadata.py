"""Read what shardpipe needs out of zarr's array metadata, and read ``zarr.json`` safely.

One place translates a zarr v3 ``ArrayV3Metadata`` into shardpipe's own
values: the shard layout (:class:`~shardpipe.core.grid.ShardLayout`), the
shard format (:class:`~shardpipe.formats.zarr_sharding.ZarrShardingFormat`)
and the ``sharding_indexed`` codec itself.

The bytes of a stored ``zarr.json`` are untrusted: :func:`read_node_metadata`
and :func:`parse_node_metadata` turn them into zarr metadata or raise
:class:`~shardpipe.errors.MetadataError` naming the file and what is wrong
(not JSON, not an object, a missing or mistyped key, a document zarr
refuses, or sizes no array can have: see :data:`MAX_SHARD_SLOTS` and
:data:`MAX_CHUNK_NBYTES`). Nothing is allocated in proportion to the sizes a
document declares before they are checked; the shard grid may be of any
size (the commands that look at shards list those present,
:mod:`shardpipe.stored.listing`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import zarr
from zarr.codecs import BytesCodec, Crc32cCodec
from zarr.core.group import GroupMetadata
from zarr.core.metadata.v3 import ArrayV3Metadata

from shardpipe.codec.chunk_codec import sharding_codec_of
from shardpipe.core.documents import parse_json_object
from shardpipe.core.grid import ShardLayout, ceildiv
from shardpipe.errors import MetadataError, ShardFormatError, ShardpipeError
from shardpipe.formats.zarr_sharding import ZarrShardingFormat

if TYPE_CHECKING:
    from shardpipe.storage.base import ShardStore
    from shardpipe.storage.resolve import ResolvedStore

MAX_NDIM = 64
"""Most dimensions an array may have (NumPy's limit)."""

MAX_EXTENT = 2**63 - 1
"""Largest extent of a dimension (NumPy indexes with signed 64-bit integers)."""

MAX_SHARD_SLOTS = 2**26
"""Most inner chunks a shard may hold: its index then takes 1 GiB."""

MAX_CHUNK_NBYTES = 2**36
"""Most bytes an inner chunk may hold decoded (64 GiB)."""

ZARR_PARSE_ERRORS: tuple[type[Exception], ...] = (
    ValueError,
    TypeError,
    KeyError,
    AttributeError,
    IndexError,
    ArithmeticError,
    RecursionError,
    NotImplementedError,
)
"""What zarr and json raise on a document they cannot read (storage errors are not here)."""


def is_sharded(metadata: Any) -> bool:
    """Whether ``metadata`` is that of a Zarr v3 array shardpipe can write (one sharding codec)."""
    if not isinstance(metadata, ArrayV3Metadata):
        return False
    try:
        sharding_codec_of(metadata)
    except ShardFormatError:
        return False
    return True


def _value(setting: Any) -> str:
    """The string value of a zarr setting that is an enum in some versions."""
    return str(getattr(setting, "value", setting))


def layout_of(metadata: ArrayV3Metadata) -> ShardLayout:
    """Return the shard and inner-chunk grids of a sharded array.

    Raises
    ------
    ShardFormatError
        If the array is not sharded on a regular grid.
    """
    sharding = sharding_codec_of(metadata)
    grid_shape = getattr(metadata.chunk_grid, "chunk_shape", None)
    if grid_shape is None:
        raise ShardFormatError("shardpipe needs a regular chunk grid")
    shard_shape = tuple(int(n) for n in grid_shape)
    return ShardLayout(tuple(metadata.shape), shard_shape, tuple(sharding.chunk_shape))


def format_of(metadata: ArrayV3Metadata) -> ZarrShardingFormat:
    """Return the shard format of a sharded array: index place and codecs, key naming.

    Raises
    ------
    ShardFormatError
        If the index codecs are not ``bytes`` optionally followed by ``crc32c``.
    """
    sharding = sharding_codec_of(metadata)
    codecs = sharding.index_codecs
    if not codecs or not isinstance(codecs[0], BytesCodec):
        raise ShardFormatError(f"unsupported index codecs {codecs}")
    rest = codecs[1:]
    if len(rest) > 1 or (rest and not isinstance(rest[0], Crc32cCodec)):
        raise ShardFormatError(f"unsupported index codecs {codecs}")
    encoding = metadata.chunk_key_encoding
    separator = str(getattr(encoding, "separator", "/"))
    prefix = "c" if _value(getattr(encoding, "name", "default")) == "default" else None
    layout = layout_of(metadata)
    return ZarrShardingFormat(
        chunks_per_shard=layout.chunks_per_shard,
        index_location="start" if _value(sharding.index_location) == "start" else "end",
        checksum=bool(rest),
        endian="big" if _value(codecs[0].endian) == "big" else "little",
        key_prefix=prefix,
        key_separator=separator,
    )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_extents(value: Any, name: str, key: str, *, least: int) -> list[int]:
    """``value`` as a list of integers in ``[least, MAX_EXTENT]``, at most ``MAX_NDIM`` long."""
    if not isinstance(value, list) or not all(_is_int(n) for n in value):
        raise MetadataError(f"{key!r}: {name} must be a list of integers, got {value!r:.200}")
    if len(value) > MAX_NDIM:
        raise MetadataError(f"{key!r}: {name} has {len(value)} dimensions, more than {MAX_NDIM}")
    if any(not least <= n <= MAX_EXTENT for n in value):
        raise MetadataError(
            f"{key!r}: {name} {value} has an extent outside [{least}, {MAX_EXTENT}]"
        )
    return list(value)


def _check_array_document(document: dict[str, Any], key: str) -> None:
    """Check what zarr does not: the types and ranges of the keys shardpipe computes with."""
    for name in ("shape", "data_type", "chunk_grid", "codecs", "fill_value"):
        if name not in document:
            raise MetadataError(f"{key!r}: the array metadata has no {name!r}")
    shape = _check_extents(document["shape"], "'shape'", key, least=0)
    grid = document["chunk_grid"]
    if not isinstance(grid, dict) or not isinstance(grid.get("configuration", {}), dict):
        raise MetadataError(f"{key!r}: 'chunk_grid' must be an object, got {grid!r:.200}")
    if grid.get("name") == "regular":
        chunks = grid.get("configuration", {}).get("chunk_shape")
        if chunks is not None:
            _check_extents(chunks, "'chunk_grid' chunk_shape", key, least=0)
    codecs = document["codecs"]
    if not isinstance(codecs, list) or not all(isinstance(c, (dict, str)) for c in codecs):
        raise MetadataError(f"{key!r}: 'codecs' must be a list of codecs, got {codecs!r:.200}")
    for codec in codecs:
        if isinstance(codec, dict) and codec.get("name") == "sharding_indexed":
            config = codec.get("configuration")
            if not isinstance(config, dict):
                raise MetadataError(f"{key!r}: the sharding_indexed codec has no configuration")
            inner = _check_extents(
                config.get("chunk_shape"), "the sharding_indexed chunk_shape", key, least=0
            )
            if len(inner) != len(shape):
                raise MetadataError(
                    f"{key!r}: the sharding_indexed chunk_shape {inner} and the shape {shape} "
                    "have different numbers of dimensions"
                )
    for name, kind in (("attributes", dict), ("chunk_key_encoding", (dict, str))):
        if name in document and not isinstance(document[name], kind):
            raise MetadataError(
                f"{key!r}: {name!r} has the wrong type, got {document[name]!r:.200}"
            )


def check_sizes(metadata: ArrayV3Metadata, key: str) -> None:
    """Refuse a sharded array whose shards or inner chunks are too large to handle.

    Raises
    ------
    MetadataError
        If a shard holds more than :data:`MAX_SHARD_SLOTS` inner chunks or an
        inner chunk more than :data:`MAX_CHUNK_NBYTES` bytes.
    """
    if not is_sharded(metadata):
        return
    sharding = sharding_codec_of(metadata)
    inner = tuple(int(n) for n in sharding.chunk_shape)
    outer = getattr(metadata.chunk_grid, "chunk_shape", None)
    if outer is not None:
        per_shard = [ceildiv(int(s), c) for s, c in zip(outer, inner, strict=False) if c]
        slots = math.prod(per_shard)
        if slots > MAX_SHARD_SLOTS:
            raise MetadataError(
                f"{key!r}: shards of shape {tuple(outer)} hold {slots:,} inner chunks of shape "
                f"{inner}, more than the {MAX_SHARD_SLOTS:,} shardpipe reads the index of"
            )
    itemsize = _itemsize(metadata)
    nbytes = math.prod(inner) * itemsize
    if nbytes > MAX_CHUNK_NBYTES:
        raise MetadataError(
            f"{key!r}: an inner chunk of shape {inner} holds {nbytes:,} bytes, more than the "
            f"{MAX_CHUNK_NBYTES:,} shardpipe decodes"
        )


def _itemsize(metadata: ArrayV3Metadata) -> int:
    try:
        return max(1, int(metadata.dtype.to_native_dtype().itemsize))
    except ZARR_PARSE_ERRORS:
        return 1


def parse_array_metadata(document: dict[str, Any], key: str) -> ArrayV3Metadata:
    """Turn the ``zarr.json`` document of an array into zarr metadata, checked.

    Raises
    ------
    MetadataError
        Naming ``key`` and what is wrong.
    """
    if document.get("zarr_format") != 3 or isinstance(document.get("zarr_format"), bool):
        raise MetadataError(
            f"{key!r}: 'zarr_format' must be 3, got {document.get('zarr_format')!r:.100}"
        )
    if document.get("node_type") != "array":
        raise MetadataError(
            f"{key!r}: 'node_type' must be 'array', got {document.get('node_type')!r:.100}"
        )
    _check_array_document(document, key)
    try:
        metadata = ArrayV3Metadata.from_dict(dict(document), path=key)
    except ShardpipeError:
        raise
    except ZARR_PARSE_ERRORS as err:
        raise MetadataError(
            f"{key!r}: zarr cannot read the array metadata ({_describe(err)})"
        ) from err
    check_sizes(metadata, key)
    return metadata


def parse_node_metadata(data: bytes, key: str) -> ArrayV3Metadata | GroupMetadata:
    """Turn the bytes of a ``zarr.json`` into array or group metadata, checked.

    Raises
    ------
    MetadataError
        Naming ``key`` and what is wrong.
    """
    document = parse_json_object(data, repr(key))
    node_type = document.get("node_type")
    if node_type == "array":
        return parse_array_metadata(document, key)
    if node_type != "group":
        raise MetadataError(
            f"{key!r}: 'node_type' must be 'array' or 'group', got {node_type!r:.100}"
        )
    if document.get("zarr_format") != 3 or isinstance(document.get("zarr_format"), bool):
        raise MetadataError(
            f"{key!r}: 'zarr_format' must be 3, got {document.get('zarr_format')!r:.100}"
        )
    try:
        return GroupMetadata.from_dict(dict(document))
    except ShardpipeError:
        raise
    except ZARR_PARSE_ERRORS as err:
        raise MetadataError(
            f"{key!r}: zarr cannot read the group metadata ({_describe(err)})"
        ) from err


def read_node_metadata(store: ShardStore, key: str) -> ArrayV3Metadata | GroupMetadata | None:
    """Read and check the ``zarr.json`` at ``key``; None when there is none.

    Raises
    ------
    MetadataError
        If it is there but broken (see :func:`parse_node_metadata`).
    """
    data = store.get(key)
    return None if data is None else parse_node_metadata(data, key)


def open_array_metadata(target: ResolvedStore) -> Any:
    """The metadata of the node at ``target``: from its ``zarr.json``, checked, or what zarr finds.

    A Zarr v3 node is read from its ``zarr.json`` by :func:`read_node_metadata`;
    without one, zarr opens what is there (a Zarr v2 array) or raises
    ``FileNotFoundError`` as before.

    Parameters
    ----------
    target : ResolvedStore
        Where the node is.

    Raises
    ------
    MetadataError
        If the metadata is broken.
    """
    key = target.key("zarr.json")
    node = read_node_metadata(target.shards, key)
    if node is None:
        try:
            return zarr.open_array(target.zarr_store, path=target.path, mode="r").metadata
        except (FileNotFoundError, ShardpipeError):
            raise
        except ZARR_PARSE_ERRORS as err:
            where = target.path or "the store root"
            raise MetadataError(
                f"zarr cannot read the metadata of the node at {where!r} ({_describe(err)})"
            ) from err
    return node


def check_tree_metadata(store: ShardStore, prefix: str) -> None:
    """Check every ``zarr.json`` under ``prefix`` (a group's members, at any depth).

    zarr skips a member whose metadata lacks a key (with a warning only),
    so a group's walk alone would pass over a broken array in silence. One
    listing of the prefix and one read per node.

    Raises
    ------
    MetadataError
        Naming the first broken ``zarr.json``.
    """
    for key in store.list(prefix):
        if key.rpartition("/")[2] == "zarr.json":
            read_node_metadata(store, key)


def broken_metadata(store: ShardStore, prefix: str, err: BaseException) -> MetadataError:
    """The error for a tree of nodes under ``prefix`` zarr failed to read with ``err``.

    Names the first broken ``zarr.json``, else zarr's error.
    """
    try:
        check_tree_metadata(store, prefix)
    except MetadataError as found:
        return found
    return MetadataError(
        f"zarr cannot read the metadata of a node under {prefix or 'the store root'!r} "
        f"({_describe(err)})"
    )


def _describe(err: BaseException) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text:.300}" if text else type(err).__name__
