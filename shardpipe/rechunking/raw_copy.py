"""The chunks of an uncompressed intermediate copy, written and read by shardpipe's own store.

A two-pass rechunk on a local disk keeps its copy uncompressed
(:attr:`~shardpipe.rechunking.intermediate.Intermediate.compressors`): a
chunk's stored bytes are then its elements, little endian, in C order,
which is what zarr-python's ``bytes`` codec stores. zarr-python still
writes the copy's ``zarr.json``, so the copy is a Zarr array any reader
opens; its chunks go through the target's kind of store
(:class:`~shardpipe.storage.base.ShardStore`: a whole chunk appears at its
key or none does) with no codec pipeline in between: writing the time
series of ``benchmarks/`` into the copy took 0.23 s of CPU this way and
0.57 s through zarr-python, reading it back 0.22 s and 0.96 s.

Only arrays of numbers and booleans go this way
(:func:`raw_copy_dtype`); the copy of others is written and read by
zarr-python, as a copy on an object store is (zstd level 1).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import dask.array as da
import numpy as np
import zarr
from dask.base import tokenize
from dask.delayed import delayed
from zarr.codecs import BytesCodec

from shardpipe.core.grid import Shape, chunks_in_region
from shardpipe.engine.scheduler import compute_settled
from shardpipe.storage.base import ShardStore
from shardpipe.storage.buffers import check_object_size
from shardpipe.storage.resolve import resolve_store

RAW_COPY_TASK = "store-raw-copy"
"""Start of the names of the tasks that store blocks into a raw copy."""


def raw_copy_dtype(dtype: np.dtype[Any]) -> bool:
    """Whether a copy of ``dtype`` is written and read here (numbers and booleans)."""
    return dtype.kind in "biufc" and dtype.fields is None and dtype.subdtype is None


def stored_raw(copy: zarr.Array[Any]) -> bool:
    """Whether the chunks of ``copy`` are its elements as this module stores them.

    Numbers and booleans (:func:`raw_copy_dtype`) whose one codec is ``bytes``,
    little endian (or none, for one byte): what zarr-python makes of a copy
    created without compressors.
    """
    codecs = copy.metadata.codecs if copy.metadata.zarr_format == 3 else ()
    if not raw_copy_dtype(copy.dtype) or len(codecs) != 1:
        return False
    codec = codecs[0]
    return isinstance(codec, BytesCodec) and codec.endian in (None, "little")


def copy_store(location: str) -> ShardStore:
    """The store of the copy at ``location`` (a local path), without fsync: it is scratch."""
    return resolve_store(location, storage_options={"fsync": False}).shards


def chunk_key(coords: tuple[int, ...]) -> str:
    """The key of the chunk at grid ``coords`` (Zarr v3's default ``c/i/j/...``)."""
    return "/".join(["c", *(str(i) for i in coords)])


def _stored_dtype(dtype: np.dtype[Any]) -> np.dtype[Any]:
    little: np.dtype[Any] = dtype.newbyteorder("<")
    return little


def store_block(
    block: np.ndarray,
    store: ShardStore,
    offset: tuple[int, ...],
    chunk_shape: Shape,
    fill_value: Any,
) -> None:
    """Store the chunks ``block`` (at ``offset`` in the array) fills whole, each at its key.

    Blocks are whole chunks, but at the array's end, where the last chunk
    is padded with ``fill_value`` to the chunk's shape, as zarr stores it.
    """
    dtype = _stored_dtype(block.dtype)
    region = tuple(slice(o, o + n) for o, n in zip(offset, block.shape, strict=True))
    for coords, inside, into in chunks_in_region(region, chunk_shape):
        piece = block[into]
        if piece.shape == tuple(chunk_shape):
            chunk = np.ascontiguousarray(piece, dtype=dtype)
        else:  # the array's last chunk along an axis: padded
            chunk = np.full(chunk_shape, fill_value, dtype=dtype)
            chunk[inside] = piece
        store.put(chunk_key(coords), [chunk.reshape(-1).view(np.uint8)])


def read_region(
    store: ShardStore,
    region: tuple[slice, ...],
    chunk_shape: Shape,
    dtype: np.dtype[Any],
    fill_value: Any,
) -> np.ndarray:
    """The elements of ``region`` of the copy (a chunk not stored reads as ``fill_value``).

    A chunk whose place in the region is one run of memory (a chunk whole
    along every axis after the first of the region's it splits) is read
    straight into it (:meth:`~shardpipe.storage.base.ShardStore.get_into`):
    the time series of ``benchmarks/`` at 256MB has 88 of its copy's 96
    chunks read so (the 8 of the last row, padded at the array's end, not).

    Raises
    ------
    ValueError
        If a chunk of the copy does not hold a chunk's bytes, naming it.
    """
    out = np.empty(tuple(r.stop - r.start for r in region), dtype=dtype)
    stored = _stored_dtype(dtype)
    whole = tuple(slice(0, n) for n in chunk_shape)
    nbytes = math.prod(chunk_shape) * stored.itemsize
    for coords, inside, into in chunks_in_region(region, chunk_shape):
        key, place = chunk_key(coords), out[into] if out.ndim else out  # a view (0-d: out)
        try:
            if inside == whole and place.flags.c_contiguous and stored == dtype:
                if not store.get_into(key, place.reshape(-1).view(np.uint8)):
                    place[...] = fill_value
                continue
            data = store.get(key)
            if data is None:
                place[...] = fill_value
                continue
            check_object_size(key, len(data), nbytes)
        except ValueError as err:
            raise ValueError(
                f"the intermediate copy, in chunks of {tuple(chunk_shape)}: {err}"
            ) from err
        place[...] = np.frombuffer(data, dtype=stored).reshape(chunk_shape)[inside]
    return out


def store_blocks(
    blocks: da.Array,
    location: str,
    chunk_shape: Shape,
    fill_value: Any,
    todo: list[tuple[int, ...]],
    each_done: Callable[[], None] | None = None,
) -> None:
    """Compute the blocks of grid indices ``todo`` and store each into the copy at ``location``.

    ``each_done`` is called as each block is stored, on a ``distributed`` client (see
    :func:`~shardpipe.engine.scheduler.compute_settled`).
    """
    store = copy_store(location)
    starts = [np.cumsum((0, *c[:-1])) for c in blocks.chunks]
    run = f"{RAW_COPY_TASK}-{tokenize(location)}"
    tasks = []
    for index in todo:
        offset = tuple(int(s[i]) for s, i in zip(starts, index, strict=True))
        (block,) = blocks.blocks[index].to_delayed().ravel()  # its graph culled and fused
        name = f"{run}-{'-'.join(map(str, index))}"
        task = delayed(store_block, pure=False)(
            block, store, offset, chunk_shape, fill_value, dask_key_name=name
        )
        tasks.append(task)
    # its names kept (the bar counts them); on a failure no store task still runs when
    # this raises, so the copy can be removed without one writing into it again
    compute_settled(tasks, [run], each_done, optimize_graph=False)


def blocks_of_copy(
    location: str,
    shape: Shape,
    dtype: np.dtype[Any],
    chunk_shape: Shape,
    block_shape: Shape,
    fill_value: Any,
) -> da.Array:
    """The copy at ``location`` as a Dask array of ``block_shape`` blocks."""
    store = copy_store(location)
    chunks = da.core.normalize_chunks(block_shape, shape)

    def read(block_info: dict[Any, Any] | None = None) -> np.ndarray:
        assert block_info is not None
        where = block_info[None]["array-location"]
        region = tuple(slice(start, stop) for start, stop in where)
        return read_region(store, region, chunk_shape, dtype, fill_value)

    blocks: da.Array = da.map_blocks(
        read,
        chunks=chunks,
        dtype=dtype,
        meta=np.empty((0,) * len(shape), dtype=dtype),
        name="read-raw-copy-" + tokenize(location, shape, dtype, chunk_shape, block_shape),
    )
    return blocks
