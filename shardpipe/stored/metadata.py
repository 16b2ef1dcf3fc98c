"""Read what shardpipe needs out of zarr's array metadata, and read ``zarr.json`` safely.

One place translates a zarr v3 ``ArrayV3Metadata`` into shardpipe's own
values: the shard layout (:class:`~shardpipe.core.grid.ShardLayout`), the
shard format (:class:`~shardpipe.formats.zarr_sharding.ZarrShardingFormat`)
and the ``sharding_indexed`` codec itself.

The bytes of a stored ``zarr.json`` are untrusted: :func:`read_node_metadata`
and :func:`parse_node_metadata` turn them into zarr metadata or raise
:class:`~shardpipe.errors.MetadataError` naming the file and what is wrong
(not JSON, not an object, a missing or mistyped key, a document zarr
refuses, or sizes no array can have: see
:data:`~shardpipe.stored.array_document.MAX_SHARD_SLOTS` and :data:`MAX_CHUNK_NBYTES`),
and how to fix it. Before zarr reads an array's document,
:func:`~shardpipe.stored.array_document.check_array_document` gives its shapes of
shards and inner chunks, its dimension names and index locations the checks a write
applies to the same arguments. Nothing is allocated in proportion to the sizes a document
declares before they are checked; the shard grid may be of any size (the
commands that look at shards list those present, :mod:`shardpipe.stored.listing`).
Readers that make Dask arrays also refuse shapes beyond what NumPy and Dask
index (:func:`check_array_size`). :func:`read_metadata` reads the array a job
writes into or looks at (a region write, an append, ``info``, ``repair``,
``compact``) with the version of its ``zarr.json``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import zarr
from zarr.codecs import BytesCodec, Crc32cCodec

from shardpipe import advice
from shardpipe.codec.chunk_codec import sharding_codec_of
from shardpipe.core.checks import check_size_limit
from shardpipe.core.documents import parse_json_object
from shardpipe.core.grid import ShardLayout
from shardpipe.errors import InvalidArgumentError, MetadataError, ShardFormatError, ShardpipeError
from shardpipe.formats.zarr_sharding import ZarrShardingFormat
from shardpipe.internals.zarr_core import (
    ArrayV3Metadata,
    GroupMetadata,
    default_buffer_prototype,
    sync,
)
from shardpipe.stored.array_document import (
    as_broken,
    broken_document,
    check_array_document,
    consolidated_arrays,
    metadata_fix,
)

if TYPE_CHECKING:
    from shardpipe.storage.base import ObjectVersion, ShardStore
    from shardpipe.storage.resolve import ResolvedStore

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


def check_sizes(metadata: ArrayV3Metadata, key: str) -> None:
    """Refuse a sharded array whose inner chunks are too large to decode.

    The count of inner chunks per shard is checked with the document
    (:data:`~shardpipe.stored.array_document.MAX_SHARD_SLOTS`).

    Raises
    ------
    MetadataError
        If an inner chunk holds more than :data:`MAX_CHUNK_NBYTES` bytes.
    """
    if not is_sharded(metadata):
        return
    inner = tuple(int(n) for n in sharding_codec_of(metadata).chunk_shape)
    nbytes = math.prod(inner) * _itemsize(metadata)
    if nbytes > MAX_CHUNK_NBYTES:
        raise broken_document(
            key,
            f"an inner chunk of shape {inner} holds {nbytes:,} bytes, more than the "
            f"{MAX_CHUNK_NBYTES:,} shardpipe decodes",
        )


def check_array_size(metadata: Any, key: str) -> None:
    """Refuse an array larger than NumPy and Dask index, as a write refuses such a shape.

    For the readers that make a Dask array of it; ``verify`` and ``info``
    look only at the shards present, and check arrays of any size.

    Parameters
    ----------
    metadata : ArrayV3Metadata or ArrayV2Metadata
        The array's metadata, as zarr read it.
    key : str
        The key of its metadata document, for the message.

    Raises
    ------
    MetadataError
        If its elements or bytes pass 2**63 - 1 (:func:`~shardpipe.core.checks.check_size_limit`).
    """
    shape = tuple(int(n) for n in metadata.shape)
    as_broken(key, "'shape'", check_size_limit, "shape", shape, _itemsize(metadata))


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
        Naming ``key``, what is wrong and the fix.
    """
    _check_zarr_format(document, key, "array")
    if document.get("node_type") != "array":
        raise broken_document(
            key, f"'node_type' must be 'array', got {document.get('node_type')!r:.100}"
        )
    check_array_document(document, key)
    try:
        metadata = ArrayV3Metadata.from_dict(dict(document), path=key)
    except ShardpipeError:
        raise
    except ZARR_PARSE_ERRORS as err:
        problem = f"zarr cannot read the array metadata ({_describe(err)})"
        raise broken_document(key, problem) from err
    check_sizes(metadata, key)
    return metadata


def _check_zarr_format(document: dict[str, Any], key: str, node: str) -> None:
    if document.get("zarr_format") != 3 or isinstance(document.get("zarr_format"), bool):
        raise broken_document(
            key, f"'zarr_format' must be 3, got {document.get('zarr_format')!r:.100}", node
        )


def parse_node_metadata(data: bytes, key: str) -> ArrayV3Metadata | GroupMetadata:
    """Turn the bytes of a ``zarr.json`` into array or group metadata, checked.

    The arrays of a group's consolidated metadata are checked as arrays
    (:func:`parse_array_metadata`): readers such as xarray open them from there.

    Raises
    ------
    MetadataError
        Naming ``key``, what is wrong and the fix.
    """
    document = parse_json_object(data, repr(key), fix=metadata_fix("node"))
    node_type = document.get("node_type")
    if node_type == "array":
        return parse_array_metadata(document, key)
    if node_type != "group":
        raise broken_document(
            key, f"'node_type' must be 'array' or 'group', got {node_type!r:.100}", "node"
        )
    _check_zarr_format(document, key, "group")
    for path, member in consolidated_arrays(document):
        check_array_document(member, f"{key} (consolidated metadata of {path!r})")
    try:
        group = GroupMetadata.from_dict(dict(document))
    except ShardpipeError:
        raise
    except ZARR_PARSE_ERRORS as err:
        raise broken_document(
            key, f"zarr cannot read the group metadata ({_describe(err)})", "group"
        ) from err
    members = group.consolidated_metadata.metadata if group.consolidated_metadata else {}
    for path, metadata in members.items():
        if isinstance(metadata, ArrayV3Metadata):
            check_sizes(metadata, f"{key} (consolidated metadata of {path!r})")
    return group


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
            raise unreadable_metadata(advice.place(target.path), err) from err
    return node


def unreadable_metadata(place: str, err: BaseException) -> MetadataError:
    """The error for the metadata of the node at ``place`` that zarr failed to read with ``err``."""
    return MetadataError(
        f"zarr cannot read the metadata of the node at {place} ({_describe(err)}). "
        f"{metadata_fix('node')}"
    )


def read_group_members(target: ResolvedStore) -> dict[str, ArrayV3Metadata | GroupMetadata]:
    """The ``zarr.json`` of the group at ``target`` and of each node directly in it, checked.

    What a reader of the group finds: zarr lists the group's folder for its
    members (unless it has consolidated metadata, checked with the group's
    document) and skips, with a warning only, one whose metadata lacks a
    key. One listing of the folder, one read per member; nothing is listed
    when no Zarr v3 group is at ``target``.

    Returns
    -------
    dict
        Metadata by the key of its ``zarr.json``, the group's first.

    Raises
    ------
    MetadataError
        Naming the first broken ``zarr.json``.
    """
    key = target.key("zarr.json")
    group = read_node_metadata(target.shards, key)
    if not isinstance(group, GroupMetadata):
        return {} if group is None else {key: group}

    async def names() -> list[str]:
        return [name async for name in target.zarr_store.list_dir(target.path)]

    found: dict[str, ArrayV3Metadata | GroupMetadata] = {key: group}
    for name in sorted(sync(names())):
        member = target.key(f"{name}/zarr.json")
        if name != "zarr.json" and (node := read_node_metadata(target.shards, member)):
            found[member] = node
    return found


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
        f"zarr cannot read the metadata of a node under {advice.place(prefix)} ({_describe(err)})"
    )


def _describe(err: BaseException) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text:.300}" if text else type(err).__name__


def read_metadata(
    target: ResolvedStore, parameter: str, *, writing: bool = True
) -> tuple[ArrayV3Metadata, ObjectVersion]:
    """Read the sharded Zarr v3 array at the target, with the version of its ``zarr.json``.

    ``writing``: the array is read to be written into (a region, an append),
    and a refusal advises how to write; else (``info``, ``repair``,
    ``compact``) it advises how to make an array those can read.

    Raises
    ------
    InvalidArgumentError
        If there is no such array, or it is not a sharded Zarr v3 array
        (named after ``parameter``).
    shardpipe.errors.MetadataError
        If its ``zarr.json`` is broken.
    """
    key = target.key("zarr.json")
    store = target.shards
    version = store.version(key)
    data = store.get(key) if version is not None else None
    where = advice.place(target.path)
    if data is None or version is None:
        v2 = store.get(target.key(".zarray")) is not None
        raise InvalidArgumentError(
            parameter,
            f"no Zarr v3 array at {where} to write into"
            + (" (a Zarr v2 array is there)" if v2 else ""),
            (
                f"Write the array first without {advice.name('region')} or "
                f"{advice.name('append_dim')}"
                + (", or rechunk the v2 array into a sharded v3 one" if v2 else "")
            )
            if writing
            else f"Point {advice.name(parameter)} at a sharded Zarr v3 array"
            + (f", or make one of this array with {advice.job('rechunk')}" if v2 else ""),
        )
    document = parse_json_object(data, repr(key), metadata_fix("array"))  # MetadataError if broken
    if document.get("node_type") == "group":
        raise InvalidArgumentError(
            parameter,
            f"{where} is a group, not an array",
            f"Point {advice.name('path')} at an array",
        )
    metadata = parse_array_metadata(document, key)
    try:
        layout_of(metadata)
    except ShardFormatError as err:
        raise InvalidArgumentError(
            parameter,
            f"the array at {where} is not sharded the way shardpipe writes ({err})",
            (
                "Write into an array whose only array-to-bytes codec is sharding_indexed on a "
                f"regular grid, or rewrite it with {advice.setting('overwrite')}"
            )
            if writing
            else f"Make a sharded copy of it with {advice.job('rechunk')}",
        ) from err
    return metadata, version


def metadata_bytes(metadata: ArrayV3Metadata) -> bytes:
    """The ``zarr.json`` document of ``metadata``."""
    buffers = metadata.to_buffer_dict(default_buffer_prototype())
    return bytes(buffers["zarr.json"].to_bytes())
