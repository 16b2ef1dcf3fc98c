"""Encoding and decoding of inner chunks through an array's inner codec chain.

The codec objects are zarr-python's own, taken from the array metadata, so
every reader that understands the metadata decodes what is written here.
Codecs that offer zarr's synchronous interface run directly on the calling
thread; any other codec runs through its asynchronous interface on a small
private event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Buffer as BytesLike
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from zarr.abc.codec import BytesBytesCodec, Codec
from zarr.core.array_spec import ArrayConfig, ArraySpec
from zarr.core.buffer import default_buffer_prototype
from zarr.core.metadata.v3 import ArrayV3Metadata

from shardpipe.core.grid import Shape
from shardpipe.metadata import sharding_codec_of


def _supports_sync(codec: Codec) -> bool:
    if not (hasattr(codec, "_encode_sync") and hasattr(codec, "_decode_sync")):
        return False
    return bool(getattr(codec, "_sync_capable", True))


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
        state["_steps"] = None
        return state

    @property
    def dtype(self) -> np.dtype[Any]:
        """NumPy dtype of the array."""
        return self.spec.dtype.to_native_dtype()

    @property
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

    @property
    def expansion(self) -> tuple[float, int]:
        """Most encoded bytes per raw byte, and most extra bytes per chunk.

        Array-to-array codecs may widen the dtype (the largest itemsize along
        the chain counts); each bytes-to-bytes codec (a compressor, a
        checksum) is allowed 1/128 more bytes plus 1 KiB, which bounds zstd,
        gzip, blosc and crc32c on incompressible data.
        """
        itemsize = self.dtype.itemsize
        widest = itemsize
        stages = 0
        for codec, spec in self._chain():
            if isinstance(codec, BytesBytesCodec):
                stages += 1
            else:
                widest = max(widest, spec.dtype.to_native_dtype().itemsize)
        factor = widest / itemsize * (1 + 1 / 128) ** stages
        return factor, 1024 * stages

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

    def encode(self, chunk: np.ndarray) -> BytesLike | None:
        """Encode one inner chunk; ``None`` when it is not to be stored.

        ``chunk`` may be smaller than the inner chunk shape (an edge chunk):
        it is padded with the fill value first.
        """
        if not self.write_empty_chunks and self.is_fill(chunk):
            return None
        data: Any = self.spec.prototype.nd_buffer.from_numpy_array(
            self.pad(np.asarray(chunk, dtype=self.dtype))
        )
        for codec, spec in self._chain():
            data = self._run(codec, "encode", data, spec)
        out: BytesLike = data.as_numpy_array()
        return out

    def decode(self, data: BytesLike) -> np.ndarray:
        """Decode the bytes of one inner chunk into an array of the inner chunk shape."""
        value: Any = self.spec.prototype.buffer.from_bytes(bytes(data))
        for codec, spec in reversed(self._chain()):
            value = self._run(codec, "decode", value, spec)
        out: np.ndarray = value.as_numpy_array()
        return out.reshape(self.chunk_shape)

    @staticmethod
    def _run(codec: Codec, direction: str, value: Any, spec: ArraySpec) -> Any:
        if _supports_sync(codec):
            return getattr(codec, f"_{direction}_sync")(value, spec)
        coroutine = getattr(codec, f"_{direction}_single")(value, spec)
        return asyncio.run(coroutine)
