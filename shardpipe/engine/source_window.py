"""Read a box of an array-like source without Dask listing every block of it.

A source made by ``da.from_zarr`` or ``da.from_array`` is one layer of
getter tasks over the array-like. Slicing it makes a layer of old-style
tasks, and Dask's culling of such a graph lists every key of the source
first: about 4-5 s for 7.5 million blocks, once per wave of a write. For
such a source, :func:`read_window` makes a new small Dask array over a
*window* on the same array-like instead, whose blocks are the wanted ones.
"""

from __future__ import annotations

from typing import Any

import dask.array as da
from dask.blockwise import Blockwise
from dask.highlevelgraph import HighLevelGraph, MaterializedLayer


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
    chunks = tuple(
        _chunks_within(sizes, s.start, s.stop) for sizes, s in zip(arr.chunks, box, strict=True)
    )
    window: da.Array = da.from_array(
        ArrayWindow(array, box), chunks=chunks, lock=False, meta=arr._meta, name=False
    )
    return window


def _chunks_within(sizes: tuple[int, ...], start: int, stop: int) -> tuple[int, ...]:
    """The block sizes between two block edges ``start`` and ``stop``."""
    out, edge = [], 0
    for size in sizes:
        if start <= edge and edge + size <= stop:
            out.append(size)
        edge += size
    return tuple(out)
