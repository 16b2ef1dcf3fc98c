"""Encoding and decoding of inner chunks through an array's inner codec chain.

The codec objects are zarr-python's own, taken from the array metadata, so
every reader that understands the metadata decodes what is written here.
Codecs that offer zarr's synchronous interface run directly on the calling
thread; any other codec runs through its asynchronous interface on a small
private event loop.

Checksums of inner chunks: the compressors of a new array end with zarr's
``crc32c`` codec by default (:mod:`shardpipe.codec.checksums`), so zarr-python,
tensorstore and zarrs refuse a chunk whose bytes changed. Decoding here checks
what it can before any codec runs: the CRC32C of each chunk; and every
compressor shardpipe knows (gzip, zlib, bz2, lzma, blosc, lz4, zstd, zarr's
own or numcodecs') decodes within the size the chunk has at that step
(:mod:`shardpipe.codec.bounded_steps`), so that a forged or damaged chunk is
reported as such instead of costing an allocation of the size it claims.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Buffer as BytesLike
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import crc32c
import numpy as np
from zarr.abc.codec import BytesBytesCodec, Codec
from zarr.codecs import BytesCodec, Crc32cCodec
from zarr.codecs.sharding import ShardingCodec

from shardpipe.codec.bounded_steps import (
    BOUNDED_KINDS,
    INTO_KINDS,
    bounded_step,
    decode_step_into,
    step_kind,
)
from shardpipe.codec.checksums import has_chunk_checksum
from shardpipe.codec.plain_chain import (
    CRC32C_NBYTES,
    EncodedChunk,
    PlainChain,
    append_crc32c,
    run_codec,
)
from shardpipe.core.grid import Shape
from shardpipe.errors import ChunkDecodeError, ShardFormatError
from shardpipe.internals.zarr_core import (
    ArrayConfig,
    ArraySpec,
    ArrayV3Metadata,
    default_buffer_prototype,
)

__all__ = [
    "CRC32C_NBYTES",
    "ChunkCodec",
    "ChunkDecodeError",
    "EncodedChunk",
]


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


@dataclass
class ChunkCodec:
    """Encode and decode inner chunks of one array.

    Parameters
    ----------
    codecs : tuple of zarr codecs
        The inner codec chain (``sharding_indexed``'s ``codecs``).
    chunk_shape : tuple of int
        Shape of an inner chunk.
    spec : zarr ArraySpec
        Spec of an inner chunk (dtype, fill value, memory order).
    write_empty_chunks : bool
        Store chunks that equal the fill value everywhere.
    """

    codecs: tuple[Codec, ...]
    chunk_shape: Shape
    spec: ArraySpec
    write_empty_chunks: bool = False
    _steps: list[tuple[Codec, ArraySpec]] | None = field(default=None, init=False, repr=False)
    _sizes: list[int | None] | None = field(default=None, init=False, repr=False)

    @classmethod
    def from_metadata(
        cls, metadata: ArrayV3Metadata, *, write_empty_chunks: bool = False
    ) -> ChunkCodec:
        """Build the inner-chunk codec of a sharded array from its metadata."""
        sharding = sharding_codec_of(metadata)
        spec = ArraySpec(
            shape=tuple(sharding.chunk_shape),
            dtype=metadata.data_type,
            fill_value=metadata.fill_value,
            config=ArrayConfig(order="C", write_empty_chunks=True),
            prototype=default_buffer_prototype(),
        )
        return cls(tuple(sharding.codecs), tuple(sharding.chunk_shape), spec, write_empty_chunks)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_steps"] = state["_sizes"] = None
        for derived in ("plain", "_into_kind", "_trailing_crc32c"):  # worked out where used
            state.pop(derived, None)  # (_into_kind depends on the machine's byte order)
        return state

    @cached_property
    def dtype(self) -> np.dtype[Any]:
        """NumPy dtype of the array."""
        return self.spec.dtype.to_native_dtype()

    @cached_property
    def fill_value(self) -> Any:
        """The fill value as a NumPy scalar of the array's dtype."""
        return np.asarray(self.spec.fill_value, dtype=self.dtype)[()]

    def _chain(self) -> list[tuple[Codec, ArraySpec]]:
        """Each codec with the spec of its input, resolved once."""
        if self._steps is None:
            steps = []
            spec = self.spec
            for codec in self.codecs:
                steps.append((codec, spec))
                spec = codec.resolve_metadata(spec)
            self._steps = steps
        return self._steps

    @cached_property
    def plain(self) -> PlainChain | None:
        """The chain's fast path (:mod:`shardpipe.codec.plain_chain`), None if it has none."""
        return PlainChain.of(self._chain(), self.dtype, self.fill_value)

    @property
    def slot_nbytes(self) -> int:
        """Bytes of a slot for :meth:`encode_slot`: a raw chunk, and room for an in-place CRC32C."""
        plain = self.plain
        return plain.slot_nbytes if plain else math.prod(self.chunk_shape) * self.dtype.itemsize

    def slot_chunk(self, slot: np.ndarray) -> np.ndarray:
        """The inner chunk held in the first bytes of ``slot`` (a 1-D ``uint8`` array)."""
        n = math.prod(self.chunk_shape) * self.dtype.itemsize
        chunk: np.ndarray = slot[:n].view(self.dtype).reshape(self.chunk_shape)
        return chunk

    def _input_sizes(self) -> list[int | None]:
        """Bytes that go into each codec of the chain when a chunk is encoded (None: unknown).

        Known up to the first codec whose output size depends on the data (a
        compressor): the raw chunk, then what fixed-size codecs (``bytes``,
        ``crc32c``, ``transpose``) make of it.
        """
        if self._sizes is None:
            sizes: list[int | None] = []
            size: int | None = math.prod(self.chunk_shape) * self.dtype.itemsize
            for codec, spec in self._chain():
                sizes.append(size)
                if size is not None and getattr(codec, "is_fixed_size", False):
                    try:
                        size = codec.compute_encoded_size(size, spec)
                    except NotImplementedError:
                        size = None
                else:
                    size = None
            self._sizes = sizes
        return self._sizes

    @property
    def checksummed(self) -> bool:
        """Whether every chunk's bytes are checked when decoded.

        See :func:`~shardpipe.codec.checksums.has_chunk_checksum`.
        """
        return has_chunk_checksum([c for c in self.codecs if isinstance(c, BytesBytesCodec)])

    @property
    def expansion(self) -> tuple[float, int]:
        """Most encoded bytes per raw byte, and most extra bytes per chunk.

        Array-to-array codecs may widen the dtype (the largest itemsize along
        the chain counts); ``crc32c`` adds its 4 bytes; every other
        bytes-to-bytes codec (a compressor) is allowed 1/128 more bytes plus
        1 KiB, which bounds zstd, gzip and blosc on incompressible data.
        """
        itemsize = self.dtype.itemsize
        widest = itemsize
        stages, extra = 0, 0
        for codec, spec in self._chain():
            if isinstance(codec, Crc32cCodec):
                extra += CRC32C_NBYTES
            elif isinstance(codec, BytesBytesCodec):
                stages += 1
            else:
                widest = max(widest, spec.dtype.to_native_dtype().itemsize)
        factor = widest / itemsize * (1 + 1 / 128) ** stages
        return factor, 1024 * stages + extra

    def is_fill(self, chunk: np.ndarray) -> bool:
        """Whether every element of ``chunk`` equals the fill value."""
        fill = self.fill_value
        if chunk.size == 0:
            return True
        first = chunk[(0,) * chunk.ndim]  # most chunks differ right away: skip the full pass
        if chunk.dtype.kind in "fc" and np.isnan(fill):
            return bool(np.isnan(first)) and bool(np.isnan(chunk).all())
        return bool(first == fill) and bool((chunk == fill).all())

    def pad(self, piece: np.ndarray) -> np.ndarray:
        """Return ``piece`` padded with the fill value to the full inner chunk shape."""
        if piece.shape == self.chunk_shape:
            return piece
        out = np.full(self.chunk_shape, self.fill_value, dtype=self.dtype)
        out[tuple(slice(0, n) for n in piece.shape)] = piece
        return out

    @property
    def encodes_raw(self) -> bool:
        """Whether a chunk's encoding is its raw bytes in a slot (maybe with a CRC32C)."""
        return self.plain is not None and not self.plain.compressors

    def encode(self, chunk: np.ndarray, slot: np.ndarray | None = None) -> BytesLike | None:
        """Encode one inner chunk; ``None`` when it is not to be stored.

        ``chunk`` may be smaller than the inner chunk shape (an edge chunk):
        it is padded with the fill value first. The result may be a view of
        ``chunk`` (a C-contiguous chunk stored uncompressed), or of ``slot``
        (:attr:`slot_nbytes` bytes), where a chain that :attr:`encodes_raw`
        copies the chunk when it must (else a new buffer).
        """
        if not self.write_empty_chunks and self.is_fill(chunk):
            return None
        plain = self.plain
        if plain is not None:
            return plain.encode(np.asarray(chunk), slot)
        return self._encode_chain(chunk)

    def encode_scattered(
        self, chunk: np.ndarray, slot: np.ndarray | None = None
    ) -> EncodedChunk | None:
        """:meth:`encode`, maybe as several buffers to write back to back (fewer copies).

        A chain that ends with a compressor then ``crc32c`` gives the
        compressed bytes and their CRC32C as two buffers; the concatenation
        is always :meth:`encode`'s bytes.
        """
        if not self.write_empty_chunks and self.is_fill(chunk):
            return None
        plain = self.plain
        if plain is not None:
            return plain.encode_scattered(np.asarray(chunk), slot)
        return self._encode_chain(chunk)

    def encode_slot(self, slot: np.ndarray) -> BytesLike | None:
        """Encode the raw chunk in ``slot``; uncompressed, the result is a view of ``slot``."""
        chunk = self.slot_chunk(slot)
        if not self.write_empty_chunks and self.is_fill(chunk):
            return None
        plain = self.plain
        if plain is not None:
            return plain.encode_slot(slot)
        return self._encode_chain(chunk)

    def _encode_chain(self, chunk: np.ndarray) -> BytesLike:
        """Encode one chunk through the codec objects, step by step (any chain)."""
        data: Any = self.spec.prototype.nd_buffer.from_numpy_array(
            self.pad(np.asarray(chunk, dtype=self.dtype))
        )
        for codec, spec in self._chain():
            if isinstance(codec, Crc32cCodec):  # the crc32c package: hardware CRC32C
                raw = data.as_numpy_array().view(np.uint8).reshape(-1)
                data = spec.prototype.buffer.from_array_like(append_crc32c(raw))
            else:
                data = run_codec(codec, "encode", data, spec)
        out: BytesLike = data.as_numpy_array()
        return out

    def decode(self, data: BytesLike) -> np.ndarray:
        """Decode the bytes of one inner chunk into an array of the inner chunk shape.

        Before a codec runs, what can be checked cheaply is: a ``crc32c``
        codec's checksum (checked here, once); a compressor step is decoded
        within the size the chunk has at that step, or :attr:`step_limit`
        where that is not known (:func:`~shardpipe.codec.bounded_steps.bounded_step`:
        a zstd frame claiming 2**40 bytes, a bz2 stream inflating to
        gigabytes are refused, never allocated).

        Raises
        ------
        ChunkDecodeError
            If the bytes are not a valid encoding of an inner chunk; the
            message says why (a codec's own failure is named with its type).
        """
        value: Any = self.spec.prototype.buffer.from_bytes(bytes(data))
        steps = self._chain()
        sizes = self._input_sizes()
        for i in reversed(range(len(steps))):
            codec, spec = steps[i]
            if isinstance(codec, Crc32cCodec):
                value = self._check_crc32c(value, spec)
                continue
            kind, size = step_kind(self._names[i]), sizes[i]
            try:
                decoded = None
                if kind in BOUNDED_KINDS and isinstance(codec, BytesBytesCodec):
                    raw = value.as_numpy_array().view(np.uint8).reshape(-1)
                    decoded = bounded_step(kind, _configuration(codec), raw, size, self.step_limit)
                if decoded is None:
                    value = run_codec(codec, "decode", value, spec)
                else:
                    value = spec.prototype.buffer.from_array_like(np.frombuffer(decoded, np.uint8))
            except ChunkDecodeError:
                raise
            except Exception as err:  # a codec's failure, named with its type
                raise ChunkDecodeError(
                    f"does not decode ({codec.to_dict()['name']}): {describe_error(err)}"
                ) from err
        out: np.ndarray = value.as_numpy_array()
        if out.size != math.prod(self.chunk_shape):
            raise ChunkDecodeError(
                f"decodes to {out.size} elements, not the {math.prod(self.chunk_shape)} of an "
                f"inner chunk of shape {self.chunk_shape}"
            )
        return out.reshape(self.chunk_shape)

    def decode_into(self, data: BytesLike, into: np.ndarray) -> bool:
        """Decode one inner chunk straight into ``into``, where the chain allows; whether it did.

        For a chain of ``bytes`` in the machine's byte order, then at most one
        compressor of :data:`~shardpipe.codec.bounded_steps.INTO_KINDS`, then
        ``crc32c`` codecs: the checksums are checked as :meth:`decode` checks
        them and the compressor writes the elements into ``into``, where
        :meth:`decode` fills a buffer of its own for the caller to copy. False,
        with nothing written, for other chains, for an ``into`` that is not a
        C-contiguous array of the chunk's shape and dtype, and for input
        :func:`~shardpipe.codec.bounded_steps.decode_step_into` leaves to
        :meth:`decode`.

        Raises
        ------
        ChunkDecodeError
            As :meth:`decode`.
        """
        kind = self._into_kind
        if kind is None or into.shape != self.chunk_shape or into.dtype != self.dtype:
            return False
        if not into.flags.c_contiguous or not into.flags.writeable:
            return False
        raw = np.frombuffer(data, np.uint8)
        for _ in range(self._trailing_crc32c):
            raw = self._strip_crc32c(raw)
        try:
            return decode_step_into(kind, raw, into.reshape(-1).view(np.uint8))
        except ChunkDecodeError:
            raise
        except Exception as err:  # the decoder's failure, named with its type
            raise ChunkDecodeError(f"does not decode ({kind}): {describe_error(err)}") from err

    @cached_property
    def _trailing_crc32c(self) -> int:
        """How many ``crc32c`` codecs end the chain."""
        n = 0
        for codec in reversed(self.codecs):
            if not isinstance(codec, Crc32cCodec):
                break
            n += 1
        return n

    @cached_property
    def _into_kind(self) -> str | None:
        """The compressor kind :meth:`decode_into` decodes (``""``: none), or None."""
        steps = list(self.codecs[: len(self.codecs) - self._trailing_crc32c])
        if not steps or not isinstance(steps[0], BytesCodec) or len(steps) > 2:
            return None
        endian = steps[0].endian
        if self.dtype.itemsize > 1 and (endian is None or endian != sys.byteorder):
            return None
        if not self.dtype.isnative or self.dtype.hasobject:
            return None
        kind = step_kind(self._names[1]) if len(steps) == 2 else ""
        return kind if kind in INTO_KINDS else None

    @staticmethod
    def _check_crc32c(value: Any, spec: ArraySpec) -> Any:
        """Check and strip the CRC32C that the ``crc32c`` codec appended."""
        raw = value.as_numpy_array().view(np.uint8).reshape(-1)
        return spec.prototype.buffer.from_array_like(ChunkCodec._strip_crc32c(raw))

    @staticmethod
    def _strip_crc32c(raw: np.ndarray) -> np.ndarray:
        """``raw`` (1-D ``uint8``) without the CRC32C it ends with, once checked."""
        if raw.size < CRC32C_NBYTES:
            raise ChunkDecodeError(
                f"holds {raw.size} byte(s), fewer than the {CRC32C_NBYTES} of its CRC32C"
            )
        body = raw[:-CRC32C_NBYTES]
        stored = int.from_bytes(raw[-CRC32C_NBYTES:].tobytes(), "little")
        computed = crc32c.crc32c(body)
        if stored != computed:
            raise ChunkDecodeError(
                f"CRC32C mismatch (stored 0x{stored:08x}, computed 0x{computed:08x})"
            )
        return body

    @property
    def step_limit(self) -> int:
        """Most bytes any step of the chain can hold for one chunk (:attr:`expansion`)."""
        factor, overhead = self.expansion
        return int(math.prod(self.chunk_shape) * self.dtype.itemsize * factor) + overhead

    @cached_property
    def _names(self) -> list[str]:
        """The name of each codec of the chain, as array metadata spells it."""
        return [_name(codec) for codec in self.codecs]


def _name(codec: Codec) -> str:
    """The codec's name in array metadata (``"gzip"``, ``"numcodecs.zlib"``...)."""
    try:
        return str(codec.to_dict()["name"])
    except (AttributeError, KeyError, TypeError, NotImplementedError):
        return type(codec).__name__


def _configuration(codec: Codec) -> dict[str, Any]:
    """The codec's configuration in array metadata (empty if it has none)."""
    try:
        configuration = codec.to_dict().get("configuration")
    except (AttributeError, TypeError, NotImplementedError):
        return {}
    return dict(configuration) if isinstance(configuration, dict) else {}


def describe_error(err: BaseException) -> str:
    """An exception as ``Type: message``, never an empty message."""
    text = str(err).strip()
    return f"{type(err).__name__}: {text}" if text else f"{type(err).__name__} (no message)"
