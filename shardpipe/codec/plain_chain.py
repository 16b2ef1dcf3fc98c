"""The fast encoding path of inner codec chains that start with a plain ``bytes`` codec.

Most arrays encode an inner chunk as: the ``bytes`` codec (the chunk's
elements in C order, in the byte order the codec asks for), then zero or
more bytes-to-bytes codecs (a compressor), then, with chunk checksums, the
``crc32c`` codec. When the ``bytes`` step changes nothing in memory (the
array's native byte order is the one stored, or one-byte elements), the
encoded bytes can be made with fewer copies than zarr's codec objects make:

* a chunk that is C-contiguous in memory is its own ``bytes`` output (a
  view, no copy);
* a chunk that is not is copied once, into a scratch buffer that each
  thread reuses when a compressor follows (the compressor's output is new
  memory; no page faults for every chunk), or into a buffer of its own
  when the raw bytes are the output;
* a trailing ``crc32c`` is written in place after the raw bytes when no
  compressor comes between (a *slot* has room for it), instead of copying
  the chunk to append four bytes; after a compressor, a caller that writes
  buffers back to back (:meth:`PlainChain.encode_scattered`) gets the
  compressed bytes and the four bytes of their CRC32C as two buffers,
  instead of a copy of the compressed bytes with the CRC32C appended;
* a chain whose one compressor is zarr's ``zstd`` calls numcodecs' zstd
  ``compress`` (what zarr's codec runs, with the same level and checksum
  flag) directly on the bytes, without zarr's buffer wrappers or the codec
  object's own checks around each call.

The bytes are the same as those of the codec objects (tests compare them).
Any other chain takes the general path in :class:`~shardpipe.codec.chunk_codec.ChunkCodec`.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Buffer as BytesLike
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import crc32c
import numpy as np
from numcodecs import zstd as numcodecs_zstd  # type: ignore[import-untyped]
from zarr.abc.codec import BytesBytesCodec, Codec
from zarr.codecs import BloscCodec, BytesCodec, Crc32cCodec, GzipCodec, ZstdCodec

from shardpipe.core.grid import Shape
from shardpipe.internals.zarr_core import ArraySpec

CRC32C_NBYTES = 4
"""Bytes the ``crc32c`` codec appends to a chunk (little-endian CRC32C of the rest)."""

FRESH_OUTPUT = (ZstdCodec, GzipCodec, BloscCodec)
"""Compressors whose output never shares memory with their input."""

type EncodedChunk = BytesLike | tuple[BytesLike, ...]
"""An encoded inner chunk: one buffer, or buffers whose concatenation is its bytes."""


def encoded_nbytes(encoded: EncodedChunk) -> int:
    """Bytes of an encoded chunk, one buffer or several."""
    if isinstance(encoded, tuple):
        return sum(memoryview(b).nbytes for b in encoded)
    return memoryview(encoded).nbytes


def crc32c_bytes(data: BytesLike) -> bytes:
    """The CRC32C of ``data`` as the ``crc32c`` codec stores it (4 bytes, little endian)."""
    return crc32c.crc32c(data).to_bytes(CRC32C_NBYTES, "little")


def _supports_sync(codec: Codec) -> bool:
    if not (hasattr(codec, "_encode_sync") and hasattr(codec, "_decode_sync")):
        return False
    return bool(getattr(codec, "_sync_capable", True))


def run_codec(codec: Codec, direction: str, value: Any, spec: ArraySpec) -> Any:
    """Run ``codec`` (``direction`` ``"encode"`` or ``"decode"``) on one chunk's value.

    Through its synchronous interface where it has one, else on a private
    event loop.
    """
    if _supports_sync(codec):
        return getattr(codec, f"_{direction}_sync")(value, spec)
    coroutine = getattr(codec, f"_{direction}_single")(value, spec)
    return asyncio.run(coroutine)


def append_crc32c(raw: np.ndarray) -> np.ndarray:
    """``raw`` (bytes, 1-D ``uint8``) followed by its CRC32C, little endian: one copy."""
    out = np.empty(raw.size + CRC32C_NBYTES, dtype=np.uint8)
    out[: raw.size] = raw
    out[raw.size :] = np.frombuffer(
        crc32c.crc32c(raw).to_bytes(CRC32C_NBYTES, "little"), dtype=np.uint8
    )
    return out


def _c_contiguous_bytes(chunk: np.ndarray) -> np.ndarray:
    """The bytes of a C-contiguous array, as a 1-D ``uint8`` view."""
    return chunk.reshape(-1).view(np.uint8)


@dataclass
class PlainChain:
    """A chain ``bytes`` (a no-op in memory), bytes-to-bytes codecs, maybe a final ``crc32c``.

    Parameters
    ----------
    dtype : numpy dtype
        The array's native dtype.
    chunk_shape : tuple of int
        Shape of an inner chunk.
    fill_value : numpy scalar
        Pads edge chunks.
    compressors : tuple of (codec, spec)
        The bytes-to-bytes steps after ``bytes``, with their input specs; a
        ``crc32c`` among them that is not the last codec stays here.
    crc_last : bool
        The chain ends with ``crc32c`` (done here, with the ``crc32c`` package).
    """

    dtype: np.dtype[Any]
    chunk_shape: Shape
    fill_value: Any
    compressors: tuple[tuple[Codec, ArraySpec], ...]
    crc_last: bool
    _local: threading.local = field(default_factory=threading.local, init=False, repr=False)

    @classmethod
    def of(
        cls, steps: list[tuple[Codec, ArraySpec]], dtype: np.dtype[Any], fill_value: Any
    ) -> PlainChain | None:
        """The plain form of a resolved chain ``steps``, or None when it has none."""
        if not steps or dtype.kind not in "biufc" or not isinstance(steps[0][0], BytesCodec):
            return None
        endian = steps[0][0].endian
        if dtype.itemsize > 1 and endian is not None and dtype.newbyteorder(endian) != dtype:
            return None  # the bytes codec swaps bytes
        rest = steps[1:]
        if not all(isinstance(codec, BytesBytesCodec) for codec, _ in rest):
            return None
        crc_last = bool(rest) and isinstance(rest[-1][0], Crc32cCodec)
        if crc_last:
            rest = rest[:-1]
        chunk_shape = tuple(steps[0][1].shape)
        return cls(dtype, chunk_shape, fill_value, tuple(rest), crc_last)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_local"]
        state.pop("_zstd", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._local = threading.local()

    @property
    def chunk_nbytes(self) -> int:
        """Raw bytes of one inner chunk."""
        return math.prod(self.chunk_shape) * self.dtype.itemsize

    @property
    def in_place_crc(self) -> bool:
        """The CRC32C follows the raw bytes directly, so a slot holds it in place."""
        return self.crc_last and not self.compressors

    @property
    def slot_nbytes(self) -> int:
        """Bytes of a slot: the raw chunk, then room for an in-place CRC32C (element-aligned)."""
        if not self.in_place_crc:
            return self.chunk_nbytes
        itemsize = self.dtype.itemsize
        return self.chunk_nbytes + -(-CRC32C_NBYTES // itemsize) * itemsize

    def slot_chunk(self, slot: np.ndarray) -> np.ndarray:
        """The chunk held in the first bytes of ``slot``, as an array of the chunk shape."""
        chunk: np.ndarray = slot[: self.chunk_nbytes].view(self.dtype).reshape(self.chunk_shape)
        return chunk

    def new_slot(self) -> np.ndarray:
        """A new, uninitialised slot of :attr:`slot_nbytes` bytes."""
        return np.empty(self.slot_nbytes, dtype=np.uint8)

    def _scratch(self) -> np.ndarray:
        """This thread's scratch slot (compressor input only: it never leaves this module)."""
        scratch: np.ndarray | None = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = self.new_slot()
            self._local.scratch_chunk = self.slot_chunk(scratch)
        return scratch

    def _into(self, slot: np.ndarray, chunk: np.ndarray) -> None:
        """Copy ``chunk`` into ``slot``, padded with the fill value to the chunk shape."""
        scratch: np.ndarray | None = getattr(self._local, "scratch", None)
        target = self._local.scratch_chunk if slot is scratch else self.slot_chunk(slot)
        if chunk.shape != self.chunk_shape:
            target.fill(self.fill_value)
            target = target[tuple(slice(0, n) for n in chunk.shape)]
        np.copyto(target, chunk, casting="unsafe")

    def encode(self, chunk: np.ndarray, slot: np.ndarray | None = None) -> BytesLike:
        """Encode one chunk (the chunk shape or smaller, an edge chunk) with at most one copy.

        Without compressors the raw bytes are copied, where they must be,
        into ``slot`` (a new one if None), which the result is a view of.
        """
        if self.in_place_crc:
            slot = self.new_slot() if slot is None else slot
            self._into(slot, chunk)
            return self.encode_slot(slot)
        if (
            chunk.shape == self.chunk_shape
            and chunk.dtype == self.dtype
            and chunk.flags.c_contiguous
        ):
            return self._compress(_c_contiguous_bytes(chunk))
        if self.compressors:
            slot = self._scratch()
        elif slot is None:
            slot = self.new_slot()
        self._into(slot, chunk)
        return self._compress(slot[: self.chunk_nbytes])

    def encode_scattered(self, chunk: np.ndarray, slot: np.ndarray | None = None) -> EncodedChunk:
        """:meth:`encode`, the CRC32C after a compressor as a buffer of its own (no copy).

        The concatenation of the result is :meth:`encode`'s bytes.
        """
        if not (self.crc_last and self.compressors):
            return self.encode(chunk, slot)
        if (
            chunk.shape == self.chunk_shape
            and chunk.dtype == self.dtype
            and chunk.flags.c_contiguous
        ):
            body = self._compressed(_c_contiguous_bytes(chunk))
        else:
            scratch = self._scratch()
            self._into(scratch, chunk)
            body = self._compressed(scratch[: self.chunk_nbytes])
        return body, crc32c_bytes(body)

    def encode_slot(self, slot: np.ndarray) -> BytesLike:
        """Encode the chunk held in ``slot``; the result may be a view of ``slot``."""
        if self.in_place_crc:
            n = self.chunk_nbytes
            raw = slot[:n]
            slot[n : n + CRC32C_NBYTES] = np.frombuffer(
                crc32c.crc32c(raw).to_bytes(CRC32C_NBYTES, "little"), dtype=np.uint8
            )
            out: BytesLike = slot[: n + CRC32C_NBYTES]
            return out
        return self._compress(slot[: self.chunk_nbytes])

    def _compress(self, raw: np.ndarray) -> BytesLike:
        """Run the compressors (and a final CRC32C) on raw bytes; without any, ``raw`` itself.

        The result never shares memory with ``raw`` when a compressor ran
        (``raw`` may be this thread's scratch slot or the caller's block).
        """
        if not self.compressors:  # a final crc32c is done in place (encode_slot)
            return raw
        result = self._compressed(raw)
        if self.crc_last:
            return append_crc32c(np.frombuffer(result, dtype=np.uint8))
        return result

    @cached_property
    def _zstd(self) -> tuple[int, bool] | None:
        """Level and checksum flag if the one compressor is zarr's ``zstd``, else None."""
        if len(self.compressors) != 1 or not isinstance(self.compressors[0][0], ZstdCodec):
            return None
        codec = self.compressors[0][0]
        return codec.level, codec.checksum

    def _compressed(self, raw: np.ndarray) -> BytesLike:
        """Run the compressors (not a final CRC32C) on raw bytes: never a view of ``raw``."""
        zstd = self._zstd
        if zstd is not None:  # what numcodecs' Zstd.encode (zarr's codec) runs on contiguous bytes
            compressed: BytesLike = numcodecs_zstd.compress(raw, *zstd)  # new bytes
            return compressed
        value: Any = self.compressors[0][1].prototype.buffer.from_array_like(raw)
        for codec, spec in self.compressors:
            if isinstance(codec, Crc32cCodec):  # not the last codec: checksums what came before
                crc = append_crc32c(value.as_numpy_array().view(np.uint8).reshape(-1))
                value = spec.prototype.buffer.from_array_like(crc)
            else:
                value = run_codec(codec, "encode", value, spec)
        result: np.ndarray = value.as_numpy_array().view(np.uint8).reshape(-1)
        last = self.compressors[-1][0]
        if not isinstance(last, FRESH_OUTPUT) and np.may_share_memory(result, raw):
            result = result.copy()  # never hand out the scratch slot or the caller's block
        return result
