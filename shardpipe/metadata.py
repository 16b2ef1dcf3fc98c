"""Read what shardpipe needs out of zarr's array metadata.

One place translates a zarr v3 ``ArrayV3Metadata`` into shardpipe's own
values: the shard layout (:class:`~shardpipe.core.grid.ShardLayout`), the
shard format (:class:`~shardpipe.formats.zarr_sharding.ZarrShardingFormat`)
and the ``sharding_indexed`` codec itself.
"""

from __future__ import annotations

from typing import Any

from zarr.codecs import BytesCodec, Crc32cCodec
from zarr.codecs.sharding import ShardingCodec
from zarr.core.metadata.v3 import ArrayV3Metadata

from shardpipe.core.grid import ShardLayout
from shardpipe.errors import ShardFormatError
from shardpipe.formats.zarr_sharding import ZarrShardingFormat


def sharding_codec_of(metadata: ArrayV3Metadata) -> ShardingCodec:
    """Return the ``sharding_indexed`` codec of ``metadata``.

    Raises
    ------
    ShardFormatError
        If the array is not sharded with a single ``sharding_indexed`` codec.
    """
    codecs = metadata.codecs
    sharding = [c for c in codecs if isinstance(c, ShardingCodec)]
    if len(codecs) != 1 or len(sharding) != 1:
        raise ShardFormatError(
            "shardpipe handles arrays whose codec chain is a single sharding_indexed codec, "
            f"got {[type(c).__name__ for c in codecs]}"
        )
    return sharding[0]


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
