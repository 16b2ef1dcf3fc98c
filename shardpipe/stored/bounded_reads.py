"""Zarr arrays read within bounds: :func:`~shardpipe.stored.bounded_reads.bounded_array`.

zarr-python reads a chunk object whole and decodes it without a bound: a few
KB of bz2 inflate to gigabytes, a forged shard index or a chunk object of
gigabytes is read whole. A rechunk reads its source through zarr-python
(``da.from_zarr``), so :func:`bounded_array` gives it the same
:class:`zarr.Array` (same store, same path: the checks of where sources and
targets live still see it) whose codec chain is replaced by one that reads
and decodes through shardpipe:

* every chunk, or every inner chunk of a shard, is decoded by
  :meth:`~shardpipe.codec.chunk_codec.ChunkCodec.decode`, whose compressor
  steps stop at the size the chunk holds at that step
  (:mod:`shardpipe.codec.bounded_steps`) and whose result must be the
  chunk's raw size;
* a stored chunk may hold at most what its codecs can make of the chunk's
  raw bytes (:attr:`~shardpipe.codec.chunk_codec.ChunkCodec.step_limit`):
  an unsharded chunk is read with a byte range one byte longer, so a larger
  object is refused having read no more; a shard object is read the same
  way, capped at what its inner chunks and index can take, and the ranges
  its index gives are refused when longer than an inner chunk can be;
* a Zarr v2 array is read as the Zarr v3 array zarr-python converts its
  metadata to (a ``transpose`` for order F, its filters, ``bytes``, its
  compressor), which holds the same bytes at the same keys;
* chunks are decoded on the event loop's thread pool, not on zarr-python's one
  event loop, which every thread of a process shares (decoded there, the chunks
  of all Dask threads would be decoded one at a time);
* a storage fault while reading (``EIO``) is the
  :class:`~shardpipe.errors.StorageError` naming the key that shardpipe's
  own reads raise (:func:`~shardpipe.storage.errnos.permanent_error`).

Arrays this cannot express are read by zarr-python as they are (see
:func:`bounded_array`).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Awaitable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numcodecs  # type: ignore[import-untyped]
import numpy as np
import zarr
from zarr.abc.codec import ArrayBytesCodec, ArrayBytesCodecPartialDecodeMixin, Codec
from zarr.abc.store import ByteGetter, ByteRequest, RangeByteRequest, Store
from zarr.codecs import BytesCodec
from zarr.codecs.sharding import ShardingCodec
from zarr.storage import StorePath, WrapperStore

from shardpipe.codec.chunk_codec import ChunkCodec
from shardpipe.errors import ChunkDecodeError, StorageError
from shardpipe.internals.zarr_core import (
    ArrayConfig,
    ArraySpec,
    ArrayV2Metadata,
    ArrayV3Metadata,
    Buffer,
    BufferPrototype,
    NDBuffer,
    SelectorTuple,
    default_buffer_prototype,
)
from shardpipe.storage.errnos import explained, permanent_error

__all__ = ["BoundedChunks", "BoundedSharding", "bounded_array", "read_mapped"]

INDEX_ENTRY_NBYTES = 16
"""Bytes of one entry of a shard index (offset and length, 8 bytes each)."""


def bounded_array(array: zarr.Array[Any]) -> zarr.Array[Any]:
    """``array`` read and decoded within bounds (see the module), or itself where it cannot be.

    Left to zarr-python as it is: element types other than numbers, booleans
    and dates (strings, objects, structured types); sharding nested in
    sharding or after other codecs; a Zarr v2 array whose metadata
    zarr-python cannot convert to Zarr v3 (filters without a v3 codec).
    """
    metadata: ArrayV2Metadata | ArrayV3Metadata = array.metadata
    if isinstance(metadata, ArrayV2Metadata):
        from zarr.metadata.migrate_v3 import _convert_array_metadata  # zarr's own conversion

        if metadata.fill_value is None:  # what zarr-python reads a missing chunk as then
            default: Any = metadata.dtype.default_scalar()
            metadata = replace(metadata, fill_value=default)
        compressor = metadata.compressor
        if compressor is not None and compressor.codec_id == "blosc":
            config = compressor.get_config()
            if config.get("shuffle") not in (0, 1, 2):  # AUTOSHUFFLE: chosen when writing
                shuffled = numcodecs.get_codec({**config, "shuffle": 1})  # the frame says which
                metadata = replace(metadata, compressor=shuffled)
        try:
            metadata = _convert_array_metadata(metadata)
        except (TypeError, ValueError):  # a filter or compressor with no Zarr v3 codec
            return array
    dtype = metadata.data_type.to_native_dtype()
    if dtype.kind not in "biufcmM" or dtype.fields is not None or dtype.subdtype is not None:
        return array
    codecs = tuple(metadata.codecs)
    shardings = [c for c in codecs if isinstance(c, ShardingCodec)]
    nested = any(isinstance(c, ShardingCodec) for s in shardings for c in s.codecs)
    if shardings and (len(codecs) != 1 or nested):  # zarr-python reads these as they are
        return array
    bounded: tuple[Codec, ...]
    if shardings:
        outer = shardings[0]
        bounded = (
            BoundedSharding(
                chunk_shape=outer.chunk_shape,
                codecs=(BoundedChunks(tuple(outer.codecs)),),
                index_codecs=outer.index_codecs,
                index_location=outer.index_location,
            ),
        )
    else:
        bounded = (BoundedChunks(codecs),)
    read = zarr.AsyncArray(
        metadata=replace(metadata, codecs=bounded),
        store_path=array.store_path,
        config=array.async_array.config,
    )
    return zarr.Array(read)


@dataclass(frozen=True, eq=False)
class BoundedChunks(ArrayBytesCodec, ArrayBytesCodecPartialDecodeMixin):
    """A chunk's whole codec chain, decoded by shardpipe within bounds (reading only).

    Parameters
    ----------
    chain : tuple of zarr codecs
        The codecs it stands for (array-to-array, array-to-bytes, bytes-to-bytes).
    """

    chain: tuple[Codec, ...]
    _codecs: dict[tuple[Any, ...], ChunkCodec] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    is_fixed_size = False

    def to_dict(self) -> dict[str, Any]:
        """What it stands for (it is never written to metadata)."""
        return {
            "name": "shardpipe.bounded_chunks",
            "configuration": {"chain": [codec.to_dict() for codec in self.chain]},
        }

    def __getstate__(self) -> dict[str, Any]:
        return {"chain": self.chain}

    def __setstate__(self, state: dict[str, Any]) -> None:
        object.__setattr__(self, "chain", state["chain"])
        object.__setattr__(self, "_codecs", {})

    def compute_encoded_size(self, input_byte_length: int, chunk_spec: ArraySpec) -> int:
        """Not known: the chain may compress."""
        raise NotImplementedError

    def chunk_codec(self, spec: ArraySpec) -> ChunkCodec:
        """The :class:`~shardpipe.codec.chunk_codec.ChunkCodec` of a chunk of ``spec``."""
        key = (tuple(spec.shape), str(spec.dtype))
        codec = self._codecs.get(key)
        if codec is None:
            shape = tuple(int(n) for n in spec.shape)
            c_spec = ArraySpec(
                shape=shape,
                dtype=spec.dtype,
                fill_value=spec.fill_value,
                config=ArrayConfig(order="C", write_empty_chunks=True),
                prototype=default_buffer_prototype(),
            )
            codec = self._codecs[key] = ChunkCodec(self.chain, shape, c_spec)
        return codec

    def stored_bound(self, spec: ArraySpec) -> int | None:
        """Most bytes a stored chunk of ``spec`` can hold; None unless serialized by ``bytes``."""
        if not any(isinstance(codec, BytesCodec) for codec in self.chain):
            return None
        return self.chunk_codec(spec).step_limit

    def decode_chunk(
        self, data: Buffer, spec: ArraySpec, where: str, into: np.ndarray | None = None
    ) -> np.ndarray:
        """The chunk of ``spec`` that the stored bytes ``data`` hold (``where`` names it).

        Decoded into ``into`` (which is then returned) where
        :meth:`~shardpipe.codec.chunk_codec.ChunkCodec.decode_into` can, else
        into a new array.
        """
        raw = data.as_numpy_array().view(np.uint8).reshape(-1)
        bound = self.stored_bound(spec)
        if bound is not None and raw.size > bound:
            raise ChunkDecodeError(  # read as at most the bound and one byte: "more than"
                f"{where}holds more than the {bound:,} bytes its codecs can make of a chunk "
                f"of shape {tuple(spec.shape)}"
            )
        codec = self.chunk_codec(spec)
        try:
            if into is not None and codec.decode_into(raw, into):
                return into
            return codec.decode(raw)
        except ChunkDecodeError as err:
            raise ChunkDecodeError(f"{where}{err}") from None

    def _decode_sync(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> NDBuffer:
        chunk = self.decode_chunk(chunk_bytes, chunk_spec, "")
        return chunk_spec.prototype.nd_buffer.from_numpy_array(chunk)

    async def _decode_single(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> NDBuffer:
        return await asyncio.to_thread(self._decode_sync, chunk_bytes, chunk_spec)

    async def _encode_single(self, chunk_array: NDBuffer, chunk_spec: ArraySpec) -> Buffer | None:
        raise NotImplementedError("an array opened by bounded_array is read, never written")

    async def _decode_partial_single(
        self, byte_getter: ByteGetter, selection: SelectorTuple, chunk_spec: ArraySpec
    ) -> NDBuffer | None:
        """Read the chunk (never more than its bound and one byte), decode it, select from it."""
        where = _where(byte_getter)
        bound = self.stored_bound(chunk_spec)
        request = None if bound is None else RangeByteRequest(0, bound + 1)
        data = await read_mapped(
            byte_getter.get(prototype=chunk_spec.prototype, byte_range=request), where
        )
        if data is None:
            return None
        chunk = await asyncio.to_thread(
            self.decode_chunk, data, chunk_spec, f"{where}: " if where else ""
        )
        return chunk_spec.prototype.nd_buffer.from_numpy_array(chunk[selection])


class BoundedSharding(ShardingCodec):
    """``sharding_indexed`` whose reads of a shard object are capped (:class:`CappedReads`).

    Its inner codecs are one :class:`BoundedChunks`; a failing inner chunk is
    named with its shard's key.

    Parameters
    ----------
    chunk_shape : tuple of int
        Shape of an inner chunk.
    codecs : tuple of zarr codecs
        The inner codecs: one :class:`BoundedChunks`.
    index_codecs : tuple of zarr codecs
        The codecs of the shard index.
    index_location : {"end", "start"}
        Where the index is.
    subchunk_write_order : str
        zarr's write order of inner chunks (never used: it is only read).
    """

    def __init__(
        self,
        *,
        chunk_shape: tuple[int, ...],
        codecs: tuple[Codec, ...],
        index_codecs: tuple[Codec, ...],
        index_location: Any = "end",
        subchunk_write_order: Any = "morton",
    ) -> None:
        super().__init__(
            chunk_shape=chunk_shape,
            codecs=codecs,
            index_codecs=index_codecs,
            index_location=index_location,
            subchunk_write_order=subchunk_write_order,
        )

    def __getstate__(self) -> dict[str, Any]:
        return {
            "chunk_shape": self.chunk_shape,
            "codecs": self.codecs,
            "index_codecs": self.index_codecs,
            "index_location": self.index_location,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        BoundedSharding.__init__(self, **state)

    def caps(self, shard_spec: ArraySpec) -> tuple[int, int] | None:
        """Most bytes of the shard object, and of one inner chunk; None if not known."""
        inner = self.codecs[0]
        if not isinstance(inner, BoundedChunks):
            return None
        spec = ArraySpec(
            shape=self.chunk_shape,
            dtype=shard_spec.dtype,
            fill_value=shard_spec.fill_value,
            config=shard_spec.config,
            prototype=shard_spec.prototype,
        )
        each = inner.stored_bound(spec)
        if each is None:
            return None
        count = math.prod(
            -(-s // c) for s, c in zip(shard_spec.shape, self.chunk_shape, strict=True)
        )
        index = count * INDEX_ENTRY_NBYTES + 1024  # the entries, with room for index codecs
        return count * each + index, each

    async def _decode_partial_single(
        self, byte_getter: ByteGetter, selection: SelectorTuple, shard_spec: ArraySpec
    ) -> NDBuffer | None:
        caps = self.caps(shard_spec)
        if not isinstance(byte_getter, StorePath) or caps is None:
            return await super()._decode_partial_single(byte_getter, selection, shard_spec)
        key = byte_getter.path
        capped = StorePath(CappedReads(byte_getter.store, whole=caps[0], each=caps[1]), key)
        try:
            return await super()._decode_partial_single(capped, selection, shard_spec)
        except ChunkDecodeError as err:
            raise ChunkDecodeError(f"{key}: {err}") from None


class CappedReads(WrapperStore[Store]):
    """A store whose reads of a shard object are refused past what the shard can hold.

    Parameters
    ----------
    store : zarr Store
        Where the shard is.
    whole : int
        Most bytes of the shard object (read whole: at most this and one byte).
    each : int
        Most bytes of a range its index gives for an inner chunk.
    """

    def __init__(self, store: Store, *, whole: int, each: int) -> None:
        super().__init__(store)
        self.whole = whole
        self.each = each

    def _with_store(self, store: Store) -> CappedReads:
        return type(self)(store, whole=self.whole, each=self.each)

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        """The bytes at ``key`` (a shard); whole, read as at most ``whole`` and one byte."""
        if byte_range is not None:
            _check_range(byte_range, self.whole, "the shard")
            return await read_mapped(self._store.get(key, prototype, byte_range), key)
        data = await read_mapped(
            self._store.get(key, prototype, RangeByteRequest(0, self.whole + 1)), key
        )
        if data is not None and len(data) > self.whole:
            raise ChunkDecodeError(
                f"the shard holds more than the {self.whole:,} bytes its inner chunks and "
                "index can take"
            )
        return data

    async def get_ranges(
        self,
        key: str,
        byte_ranges: Sequence[ByteRequest | None],
        *,
        prototype: BufferPrototype,
        **options: Any,
    ) -> AsyncIterator[Sequence[tuple[int, Buffer | None]]]:
        """The ranges of ``key`` its index gives, each refused if longer than an inner chunk.

        The ranges are read concurrently: a storage fault of one of them (``EIO``)
        is raised as itself, the :class:`~shardpipe.errors.StorageError` naming
        ``key``, not within a group of errors.
        """
        for byte_range in byte_ranges:
            if byte_range is not None:
                _check_range(byte_range, self.each, "an inner chunk")
        try:
            async for group in self._store.get_ranges(
                key, byte_ranges, prototype=prototype, **options
            ):
                yield group
        except BaseExceptionGroup as errors:
            fault = _storage_fault(errors, key)
            if fault is None:
                raise  # an absent shard (zarr reads it as missing), or not a storage fault
            raise fault from errors


def _check_range(byte_range: ByteRequest, most: int, what: str) -> None:
    if isinstance(byte_range, RangeByteRequest) and byte_range.end - byte_range.start > most:
        raise ChunkDecodeError(
            f"bytes {byte_range.start:,}-{byte_range.end:,} are asked for {what}, which holds "
            f"at most {most:,}"
        )


def _where(byte_getter: ByteGetter) -> str:
    """How messages name what ``byte_getter`` reads: a key, or an inner chunk of a shard."""
    path = getattr(byte_getter, "path", None)
    if isinstance(path, str):
        return path
    coords = getattr(byte_getter, "chunk_coords", None)
    return "" if coords is None else f"inner chunk {tuple(int(i) for i in coords)}"


def _storage_fault(errors: BaseExceptionGroup[BaseException], key: str) -> StorageError | None:
    """The first permanent storage fault among ``errors`` as shardpipe's error, if any."""
    for error in _leaves(errors):
        if isinstance(error, StorageError):
            return error
        if isinstance(error, OSError):
            mapped = permanent_error(error, f"reading {key!r}")
            if mapped is not None:
                return mapped
    return None


def _leaves(errors: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    """The errors of ``errors`` and of the groups within it, in order."""
    found: list[BaseException] = []
    for error in errors.exceptions:
        found.extend(_leaves(error) if isinstance(error, BaseExceptionGroup) else [error])
    return found


async def read_mapped(read: Awaitable[Buffer | None], key: str) -> Buffer | None:
    """The result of ``read`` (of ``key``); a permanent storage fault as shardpipe's error."""
    with explained(f"reading {key!r}"):
        return await read
