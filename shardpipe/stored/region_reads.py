"""Regions of an unsharded Zarr array read by shardpipe: chunks fetched together, decoded here.

zarr-python reads a region chunk by chunk through its codec pipeline: each
chunk is fetched, decoded into a buffer of its own, then copied into the
result, with the bookkeeping of its event loop around every step. For a
rechunk's source, read whole block by block, that costs as much CPU again
as decoding itself: reading the 365 MiB time series of ``benchmarks/`` in
blocks of 73 time slices took 2.0 s of CPU through zarr-python, 0.67-0.71 s
here through zarr's event loop with a copy of every chunk, and 0.45-0.46 s
read in the calling thread and decoded in place (below).
:class:`RegionReader` reads a region of an array opened by
:func:`~shardpipe.stored.bounded_reads.bounded_array` whose one codec is
:class:`~shardpipe.stored.bounded_reads.BoundedChunks` (every unsharded
array it can express):

* from zarr's ``LocalStore`` (shardpipe's contained one too) and
  ``MemoryStore``, each chunk is read in the calling thread and decoded
  before the next is read (:func:`read_here`); from other stores the
  region's chunks are fetched on zarr's event loop in batches of at most
  :data:`READS_IN_FLIGHT` chunks and :data:`BYTES_IN_FLIGHT` bytes
  (:data:`REMOTE_BYTES_IN_FLIGHT` on stores other than a local disk or
  memory: on an object store, that many GETs travel at once); every chunk
  is read as at most what its codecs can make of a chunk and one byte;
* each is decoded in the calling thread (a Dask worker thread: threads
  decode in parallel) by :meth:`~shardpipe.stored.bounded_reads.BoundedChunks.decode_chunk`,
  within the same bounds as a read through zarr-python: a chunk the region
  holds whole, where the codecs allow, straight into its place in the
  result (:meth:`~shardpipe.codec.chunk_codec.ChunkCodec.decode_into`),
  any other decoded and copied in; a chunk not stored reads as the fill
  value;
* a storage fault is the :class:`~shardpipe.errors.StorageError` naming the
  key, as shardpipe's own reads raise it.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import Any

import dask.array as da
import numpy as np
import zarr
from dask.base import tokenize
from zarr.abc.store import RangeByteRequest
from zarr.storage import LocalStore, MemoryStore, WrapperStore

from shardpipe.core.grid import chunks_in_region
from shardpipe.internals.zarr_core import (
    ArrayConfig,
    ArraySpec,
    ArrayV3Metadata,
    Buffer,
    default_buffer_prototype,
    sync,
)
from shardpipe.storage.errnos import explained
from shardpipe.storage.resolve import fs_protocols
from shardpipe.stored.bounded_reads import BoundedChunks, read_mapped

READS_IN_FLIGHT = 32
"""Most chunks fetched at once by one region's read (a batch, decoded before the next)."""

BYTES_IN_FLIGHT = 16 * 2**20
"""Most bytes a batch may fetch from a local disk or memory that zarr's event loop reads
(a wrapped or fsspec store), by its chunks' read bounds.

A batch's chunks are all held until it is decoded, in every thread that reads:
32 slabs of 2 MiB held 96 MiB on two threads, beside the blocks the memory
model counts. Where a fetch waits out no round trip, 16 MiB reads as fast (7
chunks of 2 MiB: a chunk counts as its read bound, a little more than its raw
size, and one byte). A batch holds at least one chunk."""

REMOTE_BYTES_IN_FLIGHT = 64 * 2**20
"""Most bytes a batch may fetch from a store whose requests wait out a round trip.

Throughput there comes from requests in flight: a rechunk of 2 MiB slabs from
S3 through a proxy of 30 ms and 25 MB/s per connection took 1.69-2.07 s with 7
at once and 1.27-1.65 s with 32 (three runs each, twice). These buffers are
not counted in ``max_mem`` (:mod:`shardpipe.core.memory`): up to this much per
thread that reads."""


@dataclass(frozen=True)
class RegionReader:
    """Reads regions of ``array`` (see the module).

    Parameters
    ----------
    array : zarr.Array
        An array from :func:`~shardpipe.stored.bounded_reads.bounded_array`
        with one :class:`~shardpipe.stored.bounded_reads.BoundedChunks` codec
        (:func:`region_reader` makes one where it applies).
    """

    array: zarr.Array[Any]

    @property
    def _metadata(self) -> ArrayV3Metadata:
        metadata = self.array.metadata
        assert isinstance(metadata, ArrayV3Metadata)  # bounded_array converts Zarr v2's
        return metadata

    @property
    def _codec(self) -> BoundedChunks:
        codec = self._metadata.codecs[0]
        assert isinstance(codec, BoundedChunks)
        return codec

    def _spec(self) -> ArraySpec:
        metadata = self._metadata
        return ArraySpec(
            shape=tuple(self.array.chunks),
            dtype=metadata.data_type,
            fill_value=metadata.fill_value,
            config=ArrayConfig(order="C", write_empty_chunks=True),
            prototype=default_buffer_prototype(),
        )

    def _key(self, coords: tuple[int, ...]) -> str:
        key = str(self.array.metadata.encode_chunk_key(coords))
        path = self.array.store_path.path
        return f"{path}/{key}" if path else key

    def read(self, region: tuple[slice, ...]) -> np.ndarray:
        """The elements of ``region`` (slices with starts and stops, no steps)."""
        chunk_shape = tuple(int(c) for c in self.array.chunks)
        spec = self._spec()
        codec = self._codec
        bound = codec.stored_bound(spec)
        request = None if bound is None else RangeByteRequest(0, bound + 1)
        store = self.array.store_path.store
        fill = self.array.metadata.fill_value
        out = np.empty(tuple(r.stop - r.start for r in region), dtype=self.array.dtype)
        every = list(chunks_in_region(region, chunk_shape))
        raw_chunk = math.prod(chunk_shape) * np.dtype(self.array.dtype).itemsize
        per_chunk = raw_chunk if bound is None else bound + 1
        here = store if isinstance(store, LocalStore | MemoryStore) else None
        in_flight = BYTES_IN_FLIGHT if _near(store) else REMOTE_BYTES_IN_FLIGHT
        step = 1 if here else max(1, min(READS_IN_FLIGHT, in_flight // per_chunk))
        for first in range(0, len(every), step):
            batch = every[first : first + step]
            keys = [self._key(coords) for coords, _, _ in batch]

            async def fetch(keys: list[str] = keys) -> list[Buffer | None]:
                prototype = default_buffer_prototype()
                reads = (read_mapped(store.get(k, prototype, request), k) for k in keys)
                return list(await asyncio.gather(*reads))

            fetched = sync(fetch()) if here is None else read_here(here, keys, request)
            for (_, inside, into), key, data in zip(batch, keys, fetched, strict=True):
                if data is None:
                    out[into] = fill
                    continue
                whole = out[into] if _whole(inside, chunk_shape) else None
                chunk = codec.decode_chunk(data, spec, f"{key}: ", into=whole)
                if chunk is not whole:
                    out[into] = chunk[inside]
        return out

    def blocks(self, block_shape: tuple[int, ...]) -> da.Array:
        """The array as a Dask array of ``block_shape`` blocks, each read by :meth:`read`."""
        shape = tuple(int(n) for n in self.array.shape)
        chunks = da.core.normalize_chunks(block_shape, shape)
        name = "read-" + tokenize(
            str(self.array.store_path), shape, str(self.array.dtype), block_shape
        )
        # the reader is an argument of the layer, where the checks of what a graph reads
        # (shardpipe.stored.locations) find the zarr array it holds
        blocked: da.Array = da.map_blocks(
            _read_block,
            self,
            chunks=chunks,
            dtype=self.array.dtype,
            meta=np.empty((0,) * len(shape), dtype=self.array.dtype),
            name=name,
        )
        return blocked


def read_here(
    store: LocalStore | MemoryStore, keys: list[str], request: RangeByteRequest | None
) -> list[Buffer | None]:
    """The chunks at ``keys`` read in the calling thread (a local disk or memory).

    Through the store's synchronous reads: no hop to zarr's event loop and
    back per batch, which cost a read of the time series of ``benchmarks/``
    (730 chunks of 512 KiB) 0.1-0.2 s of CPU. A permanent fault of the file
    system is shardpipe's error naming the key, as
    :func:`~shardpipe.stored.bounded_reads.read_mapped` makes it.
    """
    prototype = default_buffer_prototype()
    found: list[Buffer | None] = []
    for key in keys:
        with explained(f"reading {key!r}"):
            found.append(store.get_sync(key, prototype=prototype, byte_range=request))
    return found


def _whole(inside: tuple[slice, ...], chunk_shape: tuple[int, ...]) -> bool:
    """Whether ``inside`` (a chunk's part in a region) is all of the chunk."""
    return all(s.start == 0 and s.stop == n for s, n in zip(inside, chunk_shape, strict=True))


def _near(store: Any) -> bool:
    """Whether a fetch from the zarr ``store`` waits out no round trip (a local disk, memory)."""
    while isinstance(store, WrapperStore):
        store = store._store
    if isinstance(store, LocalStore | MemoryStore):
        return True
    return bool(fs_protocols(store) & {"file", "local", "memory"})


def _read_block(reader: RegionReader, block_info: dict[Any, Any] | None = None) -> np.ndarray:
    assert block_info is not None
    where = block_info[None]["array-location"]
    return reader.read(tuple(slice(start, stop) for start, stop in where))


def region_reader(array: zarr.Array[Any]) -> RegionReader | None:
    """A :class:`RegionReader` of ``array`` (from ``bounded_array``), if its chunks are plain.

    None for sharded arrays and for those read by zarr-python as they are
    (its one codec is not :class:`~shardpipe.stored.bounded_reads.BoundedChunks`),
    and for arrays of no element.
    """
    metadata = array.metadata
    codecs = tuple(metadata.codecs) if isinstance(metadata, ArrayV3Metadata) else ()
    if len(codecs) != 1 or not isinstance(codecs[0], BoundedChunks):
        return None
    if math.prod(array.shape) == 0:
        return None
    return RegionReader(array)
