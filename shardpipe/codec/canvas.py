"""Chunk-major canvases: the inner chunks of one part, each in a contiguous slot of its own.

A part gathered from several Dask blocks (or from the pieces they made) is
assembled here before it is encoded. The canvas holds the part's inner
chunks in chunk-major order: chunk after chunk, each C-contiguous in a
*slot* of :attr:`~shardpipe.codec.chunk_codec.ChunkCodec.slot_nbytes` bytes, so that
every chunk is encoded straight from the canvas (no second copy to make it
contiguous) and, uncompressed, *is* its own encoded bytes (a view of the
slot, the CRC32C written in place after it).

Pasting a box of array-ordered values costs at most ``3 ** ndim`` strided
copies (:func:`~shardpipe.core.cut.box_runs`): a (1, 1024, 1024) slab into
(64, 64, 64) chunks is one copy per part it touches, not one per chunk.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Buffer, Iterable, Iterator

import numpy as np

from shardpipe.codec.chunk_codec import ChunkCodec
from shardpipe.core.cut import box_runs
from shardpipe.core.grid import Box, ChunkBox, Coords


def _c_strides(shape: tuple[int, ...], step: int) -> tuple[int, ...]:
    """Byte strides of a C-ordered array of ``shape`` whose elements are ``step`` bytes apart."""
    strides = []
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


class ChunkCanvas:
    """The inner chunks ``chunks`` (a box of local chunk coordinates) of one shard.

    Parameters
    ----------
    codec : ChunkCodec
        The array's inner-chunk codec (dtype, chunk shape, slot size).
    chunks : ChunkBox
        The chunks of the part, local to the shard.
    origin : tuple of int
        Array coordinates of the first element of the first chunk.
    """

    def __init__(self, codec: ChunkCodec, chunks: ChunkBox, origin: Coords) -> None:
        self.codec = codec
        self.chunks = chunks
        self.origin = origin
        self.counts = tuple(b - a for a, b in zip(chunks.start, chunks.stop, strict=True))
        self.slot_nbytes = codec.slot_nbytes
        dtype = codec.dtype
        self.buffer = np.empty(math.prod(self.counts) * self.slot_nbytes, dtype=np.uint8)
        shape = self.counts + codec.chunk_shape
        strides = _c_strides(self.counts, self.slot_nbytes) + _c_strides(
            codec.chunk_shape, dtype.itemsize
        )
        self.blocked: np.ndarray = np.ndarray(
            shape, dtype=dtype, buffer=self.buffer, strides=strides
        )
        """The chunks as an array of shape ``counts + chunk_shape`` (chunk index, then element)."""
        ndim = len(self.counts)
        self._order = tuple(range(0, 2 * ndim, 2)) + tuple(range(1, 2 * ndim, 2))

    @property
    def n_elements(self) -> int:
        """Elements of all the canvas's chunks (full chunks, edges included)."""
        return math.prod(self.counts) * math.prod(self.codec.chunk_shape)

    def fill(self) -> None:
        """Set every element to the fill value."""
        self.blocked.fill(self.codec.fill_value)

    def paste(self, box: Box, values: np.ndarray) -> None:
        """Copy ``values`` (array order) to the elements at ``box`` (array coordinates)."""
        per_dim = [
            [
                (
                    slice(r.chunk, r.chunk + r.n_chunks),  # in the canvas: chunks,
                    slice(r.start, r.stop),  # elements of each,
                    slice(r.offset, r.offset + r.n_chunks * r.width),  # in values
                    (r.n_chunks, r.width),
                )
                for r in runs
            ]
            for runs in box_runs(box, self.origin, self.codec.chunk_shape)
        ]
        for combo in itertools.product(*per_dim):
            target = self.blocked[tuple(c[0] for c in combo) + tuple(c[1] for c in combo)]
            source = values[tuple(c[2] for c in combo)]
            split = [n for c in combo for n in c[3]]
            target[...] = source.reshape(split).transpose(self._order)

    def paste_chunk(self, local: Coords, values: np.ndarray) -> None:
        """Copy ``values`` to the first elements (a corner box) of chunk ``local``."""
        index = tuple(j - a for j, a in zip(local, self.chunks.start, strict=True))
        self.blocked[index][tuple(slice(0, n) for n in values.shape)] = values

    def slot(self, index: int) -> np.ndarray:
        """The slot of the ``index``-th chunk (C order of local coordinates), 1-D ``uint8``."""
        start = index * self.slot_nbytes
        slot: np.ndarray = self.buffer[start : start + self.slot_nbytes]
        return slot

    def slots(self) -> Iterator[tuple[Coords, np.ndarray]]:
        """Each chunk's local coordinates and slot, in C order of the coordinates."""
        for index, local in enumerate(self.chunks.chunks()):
            yield local, self.slot(index)

    def encode(self, skip: Iterable[Coords] = ()) -> Iterator[tuple[Coords, Buffer | None]]:
        """Encode every chunk but those in ``skip``, in C order, each when asked for.

        Uncompressed chunks are views of the canvas (see
        :meth:`~shardpipe.codec.chunk_codec.ChunkCodec.encode_slot`).
        """
        skipped = set(skip)
        for local, slot in self.slots():
            if local not in skipped:
                yield local, self.codec.encode_slot(slot)
