"""``ChunkCodec.decode_into``: a chunk decoded in its caller's buffer, or left to ``decode``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from zarr.abc.codec import Codec
from zarr.codecs import BloscCodec, BytesCodec, Crc32cCodec, GzipCodec, ZstdCodec
from zarr.dtype import parse_dtype

from shardpipe.codec.chunk_codec import ChunkCodec
from shardpipe.errors import ChunkDecodeError
from shardpipe.internals.zarr_core import ArrayConfig, ArraySpec, default_buffer_prototype

SHAPE = (6, 10, 7)


def _codec(codecs: tuple[Codec, ...], dtype: str = "<u2") -> ChunkCodec:
    spec = ArraySpec(
        shape=SHAPE,
        dtype=parse_dtype(dtype, zarr_format=3),
        fill_value=0,
        config=ArrayConfig(order="C", write_empty_chunks=True),
        prototype=default_buffer_prototype(),
    )
    return ChunkCodec(codecs, SHAPE, spec)


def _chunk(dtype: str = "<u2") -> np.ndarray:
    return (np.arange(np.prod(SHAPE)) % 97).reshape(SHAPE).astype(dtype)


LITTLE = BytesCodec(endian="little")
INTO_CHAINS = {
    "bytes": (LITTLE,),
    "bytes, crc32c": (LITTLE, Crc32cCodec()),
    "bytes, zstd, crc32c": (LITTLE, ZstdCodec(level=1), Crc32cCodec()),
    "bytes, blosc": (LITTLE, BloscCodec(typesize=2, shuffle="shuffle")),
    "bytes, zstd, crc32c, crc32c": (LITTLE, ZstdCodec(), Crc32cCodec(), Crc32cCodec()),
}


@pytest.mark.parametrize("chain", sorted(INTO_CHAINS))
def test_it_decodes_what_decode_decodes_into_the_buffer_given(chain: str) -> None:
    codec = _codec(INTO_CHAINS[chain])
    encoded = codec.encode(_chunk())
    assert encoded is not None
    into = np.full(SHAPE, 9999, "<u2")
    assert codec.decode_into(encoded, into)
    np.testing.assert_array_equal(into, codec.decode(encoded))
    np.testing.assert_array_equal(into, _chunk())


@pytest.mark.parametrize(
    ("codecs", "dtype"),
    [
        ((BytesCodec(endian="big"),), ">u2"),  # not the machine's order
        ((LITTLE, GzipCodec(level=1)), "<u2"),  # gzip: decoded by decode, bounded
        ((LITTLE, Crc32cCodec(), ZstdCodec()), "<u2"),  # a checksum before the compressor
        ((LITTLE, ZstdCodec(), ZstdCodec()), "<u2"),  # two compressors
    ],
    ids=["big endian", "gzip", "crc32c inside", "two steps"],
)
def test_other_chains_are_left_to_decode(codecs: tuple[Codec, ...], dtype: str) -> None:
    codec = _codec(codecs, dtype)
    encoded = codec.encode(_chunk(dtype))
    assert encoded is not None
    into = np.zeros(SHAPE, dtype)
    assert not codec.decode_into(encoded, into)
    assert not into.any()


def test_a_buffer_of_another_shape_dtype_or_layout_is_not_used() -> None:
    codec = _codec(INTO_CHAINS["bytes, zstd, crc32c"])
    encoded = codec.encode(_chunk())
    assert encoded is not None
    others: list[Any] = [
        np.zeros((6, 10, 8), "<u2")[..., :7],  # not contiguous
        np.zeros((7, 10, 7), "<u2"),
        np.zeros(SHAPE, "<i2"),
        np.zeros(SHAPE, "<u2").T.copy().T,  # Fortran order
    ]
    for other in others:
        assert not codec.decode_into(encoded, other)
        assert not other.any()
    frozen = np.zeros(SHAPE, "<u2")
    frozen.flags.writeable = False
    assert not codec.decode_into(encoded, frozen)


def test_damaged_and_mismatched_chunks_are_refused_as_decode_refuses_them() -> None:
    codec = _codec(INTO_CHAINS["bytes, zstd, crc32c"])
    encoded = bytearray(bytes(memoryview(codec.encode(_chunk()))))  # type: ignore[arg-type]
    encoded[10] ^= 0xFF
    into = np.zeros(SHAPE, "<u2")
    with pytest.raises(ChunkDecodeError, match="CRC32C mismatch"):
        codec.decode_into(bytes(encoded), into)
    smaller = _codec((LITTLE, ZstdCodec()))
    other = _codec((LITTLE, ZstdCodec()), "<u4").encode(_chunk("<u4"))  # twice the bytes
    assert other is not None
    with pytest.raises(
        ChunkDecodeError, match=r"declares 1680 bytes of content, the chunk holds 840"
    ):
        smaller.decode_into(other, into)
    with pytest.raises(ChunkDecodeError, match="holds 3 bytes where the chunk holds 840"):
        _codec((LITTLE,)).decode_into(b"abc", into)
    with pytest.raises(ChunkDecodeError, match=r"declares 1,680 decoded bytes, the 840"):
        _codec((LITTLE, BloscCodec(typesize=4, shuffle="noshuffle"))).decode_into(
            _codec((LITTLE, BloscCodec(typesize=4, shuffle="noshuffle")), "<u4").encode(
                _chunk("<u4")
            ),
            into,
        )
    damaged = bytearray(bytes(memoryview(smaller.encode(_chunk()))))  # type: ignore[arg-type]
    damaged[-3:] = b"\xff\xff\xff"
    with pytest.raises(ChunkDecodeError, match=r"does not decode \(zstd\)"):
        smaller.decode_into(bytes(damaged), into)


def test_a_zstd_frame_that_declares_no_size_is_left_to_decode() -> None:
    frame = (0xFD2FB528).to_bytes(4, "little") + bytes([0x00, 0x38])  # no content size
    frame += (1 | 1 << 1 | 840 << 3).to_bytes(3, "little") + b"\0"  # one RLE block: 840 zeros
    codec = _codec((LITTLE, ZstdCodec()))
    into = np.ones(SHAPE, "<u2")
    assert not codec.decode_into(frame, into)
    assert into.all()
    assert not codec.decode(frame).any()


def test_what_depends_on_the_machine_is_not_pickled() -> None:
    import pickle

    codec = _codec(INTO_CHAINS["bytes, zstd, crc32c"])
    assert codec._into_kind == "zstd" and codec._trailing_crc32c == 1
    state = codec.__getstate__()
    assert "_into_kind" not in state and "_trailing_crc32c" not in state
    assert pickle.loads(pickle.dumps(codec))._into_kind == "zstd"  # worked out again
