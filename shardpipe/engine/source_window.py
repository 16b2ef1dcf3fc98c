"""Read a box of an array-like source without Dask listing every block of it.

A source made by ``da.from_zarr`` or ``da.from_array`` is one layer of
getter tasks over the array-like. Slicing it makes a layer of old-style
tasks, and Dask's culling of such a graph lists every key of the source
first: about 4-5 s for 7.5 million blocks, once per wave of a write. For
such a source, :func:`read_window` makes a new small Dask array over a
*window* on the same array-like instead, whose blocks are the wanted ones.

A source made by ``da.from_array`` over a NumPy array in memory can also be
read in any other blocks at no cost: its blocks are views. When its blocks
do not line up with the shards (cubes across shard edges, single-plane
slabs), every shard would be gathered from pieces of several blocks: a
canvas to paste them on, a task per block and a read gate per block.
:func:`in_shard_blocks` reads it in blocks of one shard instead, so each
shard is cut from a view of its own region like aligned blocks are.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import dask.array as da
import numpy as np
from dask.blockwise import Blockwise
from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

from shardpipe.core.grid import Box, Coords


class ArrayWindow:
    """A box of an array-like, indexed from the box's origin.

    Parameters
    ----------
    array : array-like
        Anything with ``shape``, ``dtype`` and NumPy-style basic indexing.
    box : tuple of slice
        The box, with concrete starts and stops and no steps.
    """

    def __init__(self, array: Any, box: tuple[slice, ...]) -> None:
        self.array = array
        self.box = box
        self.shape = tuple(int(s.stop) - int(s.start) for s in box)
        self.dtype = array.dtype
        self.ndim = len(box)

    def __getitem__(self, index: tuple[slice, ...]) -> Any:
        moved = tuple(
            slice(b.start + (s.start or 0), b.start + (n if s.stop is None else s.stop))
            for b, s, n in zip(self.box, index, self.shape, strict=True)
        )
        return self.array[moved]

    def __reduce__(self) -> tuple[Any, ...]:
        return ArrayWindow, (self.array, self.box)


def read_window(arr: da.Array, box: tuple[slice, ...]) -> da.Array | None:
    """``arr[box]`` read through a window on its array-like, if ``arr`` reads one directly.

    ``box`` must start and stop on ``arr``'s block edges. Returns None for
    any other source (computed, transformed, or an array-like inlined in
    every task), which the caller slices as usual.
    """
    array = direct_source(arr)
    if array is None:
        return None
    chunks = tuple(
        _chunks_within(sizes, s.start, s.stop) for sizes, s in zip(arr.chunks, box, strict=True)
    )
    window: da.Array = da.from_array(
        ArrayWindow(array, box), chunks=chunks, lock=False, meta=arr._meta, name=False
    )
    return window


def direct_source(arr: da.Array) -> Any | None:
    """The array-like that ``arr`` reads directly (``da.from_array``), or None.

    None for any other source: computed, transformed, or an array-like
    inlined in every task (``inline_array=True``).
    """
    graph = arr.__dask_graph__()
    if not isinstance(graph, HighLevelGraph):
        return None
    layers = graph.layers
    original = layers.get(f"original-{arr.name}")
    if len(layers) != 2 or not isinstance(original, MaterializedLayer):
        return None
    if not isinstance(layers.get(arr.name), Blockwise):
        return None
    array = original.get(f"original-{arr.name}")
    if not all(hasattr(array, a) for a in ("shape", "dtype", "__getitem__")):
        return None
    return array


def in_shard_blocks(arr: da.Array, shard_shape: tuple[int, ...]) -> da.Array:
    """``arr`` in blocks of one shard each if it reads a NumPy array in memory; else ``arr``.

    Only where some block edge is not a shard edge (so that a shard would be
    gathered from several blocks): blocks that already tile whole shards are
    kept, as is any source that is not a NumPy array (or memory map) read
    by ``da.from_array``, where reading other blocks would read the same
    data again. The blocks are views of the array: no copy, and the values
    are those of ``arr``.
    """
    if arr.ndim != len(shard_shape) or all(
        _on_edges(sizes, step) for sizes, step in zip(arr.chunks, shard_shape, strict=True)
    ):
        return arr
    array = direct_source(arr)
    if array is None:
        array = _viewed_array(arr)
    if not isinstance(array, np.ndarray) or type(array) not in (np.ndarray, np.memmap):
        return arr  # not a subclass with its own indexing (masked arrays, matrices)
    return views_in_blocks(array, shard_shape, f"in-shards-{arr.name}")


def views_memory(arr: da.Array) -> bool:
    """Whether ``arr``'s blocks are views of a NumPy array in memory (holding them costs nothing).

    True for ``da.from_array`` of a NumPy array (or memory map), and for
    :func:`views_in_blocks`; False for blocks computed by tasks or read.
    """
    array = direct_source(arr)
    if array is None:
        array = _viewed_array(arr)
    return isinstance(array, np.ndarray)


def views_in_blocks(array: np.ndarray, block_shape: tuple[int, ...], name: str) -> da.Array:
    """``array`` as a Dask array named ``name`` whose blocks of ``block_shape`` are views of it.

    Nothing is copied (``da.from_array`` copies the whole array first): the
    blocks read ``array`` as it is when the graph runs.
    """
    chunks = da.core.normalize_chunks(block_shape, array.shape, dtype=array.dtype)
    views: dict[Any, Any] = {
        (name, *index): array[tuple(slice(a, b) for a, b in box)] for index, box in _blocks(chunks)
    }
    graph = HighLevelGraph.from_collections(name, views, dependencies=())
    return da.Array(graph, name, chunks, meta=array[(slice(0, 0),) * array.ndim])


MOST_VIEWS_CHECKED = 100_000
"""Most blocks ``_viewed_array`` checks before giving up (a second or so of Python)."""


def _viewed_array(arr: da.Array) -> np.ndarray | None:
    """The NumPy array whose views are ``arr``'s blocks (``da.from_array`` of an ndarray), or None.

    Dask makes such a source one layer of data: each block a view of the
    array. It is the array when every block is a view of one base, with the
    array's strides, starting where its box starts: the result is then a
    view of that base (read only) with ``arr``'s shape.
    """
    graph = arr.__dask_graph__()
    if not isinstance(graph, HighLevelGraph) or len(graph.layers) != 1:
        return None
    layer = graph.layers.get(arr.name)
    if not isinstance(layer, MaterializedLayer) or math.prod(arr.numblocks) > MOST_VIEWS_CHECKED:
        return None
    first = layer.get((arr.name, *(0,) * arr.ndim))
    if type(first) is not np.ndarray or first.base is None or first.dtype != arr.dtype:
        return None
    start = first.__array_interface__["data"][0]
    strides = first.strides
    bounds = [np.cumsum((0, *sizes)).tolist() for sizes in arr.chunks]
    for index in np.ndindex(*arr.numblocks):
        block = layer.get((arr.name, *index))
        if type(block) is not np.ndarray or block.base is not first.base:
            return None
        if block.size == 0:
            continue
        at = start + sum(
            bounds[d][i] * step for d, (i, step) in enumerate(zip(index, strides, strict=True))
        )
        shape = tuple(bounds[d][i + 1] - bounds[d][i] for d, i in enumerate(index))
        if block.strides != strides or block.shape != shape:
            return None
        if block.__array_interface__["data"][0] != at:
            return None
    view: np.ndarray = np.lib.stride_tricks.as_strided(
        first, shape=arr.shape, strides=strides, writeable=False
    )
    return view


def _blocks(chunks: tuple[tuple[int, ...], ...]) -> Iterator[tuple[Coords, Box]]:
    """Each block of a grid of ``chunks``: its index and its box."""
    bounds = [np.cumsum((0, *sizes)).tolist() for sizes in chunks]
    for index in np.ndindex(*(len(sizes) for sizes in chunks)):
        yield index, tuple((bounds[d][i], bounds[d][i + 1]) for d, i in enumerate(index))


def _on_edges(sizes: tuple[int, ...], step: int) -> bool:
    """Whether every edge between blocks of ``sizes`` is a multiple of ``step``."""
    edge = 0
    for size in sizes[:-1]:
        edge += size
        if edge % step:
            return False
    return True


def _chunks_within(sizes: tuple[int, ...], start: int, stop: int) -> tuple[int, ...]:
    """The block sizes between two block edges ``start`` and ``stop``."""
    out, edge = [], 0
    for size in sizes:
        if start <= edge and edge + size <= stop:
            out.append(size)
        edge += size
    return tuple(out)
