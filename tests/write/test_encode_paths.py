"""The fast encoding paths give the bytes of the codec objects, and canvases hold the right values.

* :class:`~shardpipe.codec.plain_chain.PlainChain` (``ChunkCodec.encode`` and
  ``encode_slot``) against the step-by-step chain of zarr's codec objects
  (``ChunkCodec._encode_chain``), for every dtype, compressor, checksum
  setting, byte order, chunk layout in memory (contiguous, strided, edge);
* :class:`~shardpipe.codec.canvas.ChunkCanvas` against cutting chunks out of an
  array assembled by hand.
"""

from __future__ import annotations

import itertools
from typing import Any, Literal

import numpy as np
import pytest
import zarr
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st
from zarr.codecs import BloscCodec, BytesCodec, Crc32cCodec, GzipCodec, TransposeCodec, ZstdCodec

from shardpipe.codec.canvas import ChunkCanvas
from shardpipe.codec.checksums import checksummed_compressors
from shardpipe.codec.chunk_codec import ChunkCodec
from shardpipe.core.grid import ChunkBox
from shardpipe.internals.zarr_core import ArrayV3Metadata
from shardpipe.testing.strategies import DTYPES
from tests.support.examples import scaled

SETTINGS = settings(max_examples=scaled(60), deadline=None)
COMPRESSORS: dict[str, Any] = {
    "none": None,
    "zstd": ZstdCodec(level=1),
    "gzip": GzipCodec(level=1),
    "blosc": BloscCodec(cname="lz4", clevel=3, shuffle="shuffle"),
    "crc-then-zstd": (Crc32cCodec(), ZstdCodec(level=1)),
}


def make_codec(
    dtype: str,
    chunk_shape: tuple[int, ...],
    compressor: str,
    *,
    checksums: bool = True,
    endian: Literal["little", "big"] = "little",
    transpose: bool = False,
    fill_value: Any = None,
) -> ChunkCodec:
    compressors = checksummed_compressors(COMPRESSORS[compressor], dtype, chunk_checksums=checksums)
    array = zarr.create_array(
        zarr.storage.MemoryStore(),
        shape=chunk_shape,
        dtype=dtype,
        chunks=chunk_shape,
        shards=chunk_shape,
        compressors=compressors,
        serializer=BytesCodec(endian=endian) if np.dtype(dtype).itemsize > 1 else "auto",
        filters=[TransposeCodec(order=tuple(reversed(range(len(chunk_shape)))))]
        if transpose
        else None,
        fill_value=fill_value,
    )
    assert isinstance(array.metadata, ArrayV3Metadata)
    return ChunkCodec.from_metadata(array.metadata)


def values(dtype: str, shape: tuple[int, ...], seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 4, size=shape) * 3 + 1).astype(dtype)  # compressible, never all fill


def as_bytes(encoded: Any) -> bytes:
    return bytes(memoryview(encoded).cast("B"))


def comparable(encoded: Any, compressor: str, checksums: bool) -> bytes:
    """``encoded`` with gzip's header time (bytes 4-7, in seconds) zeroed.

    Two gzip encodings a second apart differ there, and in the CRC32C after it.
    """
    raw = bytearray(as_bytes(encoded))
    if compressor == "gzip":
        raw[4:8] = bytes(4)
        if checksums:
            raw[-4:] = crc32c(raw[:-4]).to_bytes(4, "little")
    return bytes(raw)


@pytest.mark.parametrize("compressor", sorted(COMPRESSORS))
@pytest.mark.parametrize("checksums", [True, False])
@given(dtype=st.sampled_from(DTYPES), data=st.data())
@SETTINGS
def test_encode_gives_the_bytes_of_the_codec_objects(
    compressor: str, checksums: bool, dtype: str, data: st.DataObject
) -> None:
    ndim = data.draw(st.integers(1, 3))
    chunk_shape = tuple(data.draw(st.integers(1, 6)) for _ in range(ndim))
    endian: Literal["little", "big"] = data.draw(st.sampled_from(["little", "big"]))
    transpose = data.draw(st.booleans())
    codec = make_codec(
        dtype, chunk_shape, compressor, checksums=checksums, endian=endian, transpose=transpose
    )
    plain = endian == "little" or np.dtype(dtype).itemsize == 1
    assert (codec.plain is not None) == (plain and not transpose)
    # a chunk as a view of a larger block: strided, C-contiguous, or an edge chunk
    layout = data.draw(st.sampled_from(["strided", "contiguous", "edge", "byte-swapped"]))
    block = values(dtype, tuple(2 * n + 1 for n in chunk_shape), data.draw(st.integers(0, 99)))
    if layout == "strided":
        chunk = block[tuple(slice(1, 1 + n) for n in chunk_shape)]
    elif layout == "contiguous":
        chunk = np.ascontiguousarray(block[tuple(slice(0, n) for n in chunk_shape)])
    elif layout == "edge":
        chunk = block[tuple(slice(0, max(1, n - 1)) for n in chunk_shape)]
    else:
        swapped = block.dtype.newbyteorder()  # the same values, another dtype (byte order)
        chunk = block[tuple(slice(0, n) for n in chunk_shape)].astype(swapped)
    expected = comparable(codec._encode_chain(chunk), compressor, checksums)
    encoded = codec.encode(chunk)
    assert encoded is not None
    assert comparable(encoded, compressor, checksums) == expected
    slot = np.zeros(codec.slot_nbytes, dtype=np.uint8)
    codec.slot_chunk(slot)[...] = codec.pad(np.asarray(chunk, dtype=codec.dtype))
    from_slot = codec.encode_slot(slot)
    assert from_slot is not None
    assert comparable(from_slot, compressor, checksums) == expected
    scattered = codec.encode_scattered(chunk)
    assert scattered is not None
    assert comparable(joined(scattered), compressor, checksums) == expected


def joined(encoded: Any) -> bytes:
    """The bytes of an encoded chunk given as one buffer or a tuple of them."""
    parts = encoded if isinstance(encoded, tuple) else (encoded,)
    return b"".join(as_bytes(p) for p in parts)


@pytest.mark.parametrize("compressor", ["zstd", "gzip", "blosc"])
def test_a_compressed_chunk_and_its_crc32c_come_as_two_buffers(compressor: str) -> None:
    """No copy of the compressed bytes to append 4: the CRC32C is a buffer of its own."""
    codec = make_codec("uint16", (4, 8, 8), compressor)
    chunk = values("uint16", (8, 16, 16), 3)[:4, :8, :8]
    body, crc = codec.encode_scattered(chunk)  # type: ignore[misc]
    assert as_bytes(crc) == crc32c(as_bytes(body)).to_bytes(4, "little")
    assert comparable(joined((body, crc)), compressor, True) == comparable(
        codec._encode_chain(chunk), compressor, True
    )


@pytest.mark.parametrize("compressor", ["none", "zstd", "gzip", "blosc"])
@pytest.mark.parametrize("checksums", [True, False])
def test_results_never_share_the_scratch_slot(compressor: str, checksums: bool) -> None:
    """Each thread reuses one scratch slot for compressor input: results stay valid after."""
    codec = make_codec("uint16", (4, 8, 8), compressor, checksums=checksums)
    block = values("uint16", (8, 16, 16), 1)
    chunks = [
        block[a : a + 4, b : b + 8, c : c + 8]
        for a, b, c in itertools.product((0, 4), (0, 8), (0, 8))
    ]
    results = [codec.encode(chunk) for chunk in chunks]
    for chunk, result in zip(chunks, results, strict=True):
        assert result is not None
        expected = comparable(codec._encode_chain(chunk), compressor, checksums)
        assert comparable(result, compressor, checksums) == expected


def test_uncompressed_chunks_are_views_where_the_layout_allows() -> None:
    """No copy: a contiguous chunk without checksum is its own bytes; a slot holds its CRC32C."""
    codec = make_codec("uint16", (4, 8, 8), "none", checksums=False)
    chunk = values("uint16", (4, 8, 8), 2)
    assert np.shares_memory(np.asarray(codec.encode(chunk)), chunk)
    checked = make_codec("uint16", (4, 8, 8), "none", checksums=True)
    slot = np.empty(checked.slot_nbytes, dtype=np.uint8)
    checked.slot_chunk(slot)[...] = chunk
    encoded = checked.encode_slot(slot)
    assert np.shares_memory(np.asarray(encoded), slot)
    assert as_bytes(encoded) == as_bytes(checked._encode_chain(chunk))
    # a chunk cut from a block is copied into the slot given (one buffer for a whole part)
    strided = values("uint16", (4, 9, 9), 3)[:, 1:, :8]
    for codec_ in (codec, checked):
        slot = np.empty(codec_.slot_nbytes, dtype=np.uint8)
        encoded = codec_.encode(strided, slot)
        assert np.shares_memory(np.asarray(encoded), slot)
        assert as_bytes(encoded) == as_bytes(codec_._encode_chain(strided))


def test_fill_chunks_are_not_stored_on_every_path() -> None:
    codec = make_codec("float32", (4, 4), "none", fill_value=np.nan)
    nan = np.full((4, 4), np.nan, dtype=np.float32)
    assert codec.encode(nan) is None
    slot = np.empty(codec.slot_nbytes, dtype=np.uint8)
    codec.slot_chunk(slot)[...] = nan
    assert codec.encode_slot(slot) is None


@given(data=st.data())
@SETTINGS
def test_canvas_holds_each_chunk_as_cut_from_the_array(data: st.DataObject) -> None:
    ndim = data.draw(st.integers(1, 3))
    chunk_shape = tuple(data.draw(st.integers(1, 5)) for _ in range(ndim))
    counts = tuple(data.draw(st.integers(1, 4)) for _ in range(ndim))
    start = tuple(data.draw(st.integers(0, 2)) for _ in range(ndim))
    checksums = data.draw(st.booleans())
    compressor = data.draw(st.sampled_from(["none", "zstd"]))
    codec = make_codec("int16", chunk_shape, compressor, checksums=checksums, fill_value=-1)
    origin = tuple(3 * c + a * c for a, c in zip(start, chunk_shape, strict=True))
    chunks = ChunkBox(start, tuple(a + n for a, n in zip(start, counts, strict=True)))
    canvas = ChunkCanvas(codec, chunks, origin)
    canvas.fill()
    full = tuple(n * c for n, c in zip(counts, chunk_shape, strict=True))
    expected = np.full(full, -1, dtype=np.int16)
    source = values("int16", full, data.draw(st.integers(0, 99)))
    for _ in range(data.draw(st.integers(0, 4))):
        lo = [data.draw(st.integers(0, n - 1)) for n in full]
        hi = [data.draw(st.integers(a + 1, n)) for a, n in zip(lo, full, strict=True)]
        where = tuple(slice(a, b) for a, b in zip(lo, hi, strict=True))
        box = tuple((o + a, o + b) for o, a, b in zip(origin, lo, hi, strict=True))
        canvas.paste(box, source[where])
        expected[where] = source[where]
    slots = list(canvas.slots())
    assert [local for local, _ in slots] == list(chunks.chunks())
    for local, slot in slots:
        cut = tuple(
            slice((j - a) * c, (j - a + 1) * c)
            for j, a, c in zip(local, start, chunk_shape, strict=True)
        )
        np.testing.assert_array_equal(codec.slot_chunk(slot), expected[cut])
        encoded = codec.encode_slot(slot)
        reference = codec.encode(expected[cut])
        assert (encoded is None) == (reference is None)
        if encoded is not None:
            assert as_bytes(encoded) == as_bytes(reference)
