"""The intermediate copy of a two-pass rechunk: write it, read it, remove it.

When the blocks a one-pass rechunk can afford are thinner than the target's
inner chunks (:func:`~shardpipe.core.source_blocks.straddles`), each shard is
gathered from raw pieces of many blocks, which wait in memory until the
shard's last block is read. With ``temp_store``, the rechunk goes in two
passes instead: the first copies the source, block by block, into an
unsharded Zarr v3 array whose chunks those blocks fill whole
(:func:`~shardpipe.core.source_blocks.intermediate_chunks`; uncompressed on a
local disk, zstd level 1 on an object store: :attr:`Intermediate.compressors`);
the second reads that
copy in blocks of whole inner chunks, which are written part by part as they
are read. The copy is deleted when the second pass succeeds.

A killed first pass leaves the copy and its record
(:mod:`shardpipe.rechunking.copy_record`); resumed, :meth:`Intermediate.write`
keeps the blocks whose chunks are all stored and copies the others. That is
sound where a chunk appears whole or not at all under its key: zarr-python
writes a chunk on a local disk to a temporary file renamed over its key, and
an object store's PUT is atomic. A block whose chunks are all fill value
stores none, and is copied again.
"""

from __future__ import annotations

import itertools
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, Literal

import dask.array as da
import numpy as np
import zarr
from dask.callbacks import Callback
from zarr.codecs import ZstdCodec

from shardpipe.core.display import format_bytes
from shardpipe.core.grid import Shape, ceildiv
from shardpipe.core.source_blocks import ReadCost
from shardpipe.engine.progress import PassesBar
from shardpipe.engine.scheduler import compute_settled, distributed_client
from shardpipe.rechunking.memory import copy_is_local
from shardpipe.rechunking.raw_copy import (
    RAW_COPY_TASK,
    blocks_of_copy,
    store_blocks,
    stored_raw,
)
from shardpipe.storage.loopless_finalizers import close_on_their_loops
from shardpipe.stored.bounded_reads import bounded_array
from shardpipe.stored.region_reads import region_reader


@dataclass(frozen=True)
class Intermediate:
    """Where and how a two-pass rechunk keeps its intermediate copy.

    Attributes
    ----------
    store : str
        Local path or fsspec URL of the copy.
    storage_options : dict or None
        fsspec options for it.
    chunk_shape : tuple of int
        Its chunks.
    block_shape : tuple of int
        The blocks the first pass reads the source in.
    cost : ReadCost
        What the first pass reads.
    placed : bool
        Whether shardpipe chose the place (no ``temp_store`` given).
    found : str or None
        For ``resume=True``: what a killed run left there, by its record:
        ``"copying"`` (a copy under way) or ``"copied"`` (complete).
    identity : dict
        What the copy is made of (:func:`~shardpipe.rechunking.copy_record.copy_identity`),
        for its record.
    """

    store: str
    storage_options: dict[str, Any] | None
    chunk_shape: Shape
    block_shape: Shape
    cost: ReadCost
    placed: bool = False
    found: Literal["copying", "copied"] | None = None
    identity: dict[str, Any] = field(default_factory=dict)

    @property
    def compressors(self) -> tuple[ZstdCodec, ...] | None:
        """The copy's compressors: none on a local disk, zstd level 1 elsewhere.

        On a local disk the copy stays in the page cache and encoding costs
        more than the bytes it saves (the time series of ``benchmarks/`` at 256MB:
        6.0 s with a zstd copy, 4.4 s with a raw one, back to back while other
        jobs ran); on an object store its bytes are the cost.
        """
        return None if copy_is_local(self.store) else (ZstdCodec(level=1),)

    def describe(self) -> str:
        """A line for the plan's summary."""
        found = {
            None: "",
            "copied": "; resumed: the earlier run's copy is complete, pass 1 is skipped",
            "copying": "; resumed: the earlier run's copy is partial, pass 1 keeps the blocks "
            "whose chunks are all stored and copies the others",
        }[self.found]
        stored = "zstd" if self.compressors else "uncompressed"
        return (
            f"{self.store}: {format_bytes(self.cost.nbytes_source)} raw in chunks "
            f"{self.chunk_shape} ({stored}); pass 1 reads the source in blocks of "
            f"{self.block_shape} "
            f"({self.cost.reads:,} reads, amplification {self.cost.amplification:.2f}x); "
            f"deleted afterwards{found}"
        )

    def open(self, shape: Shape, dtype: np.dtype[Any]) -> zarr.Array[Any] | None:
        """The copy a killed run left, if it opens as this plan's (shape, dtype, chunks)."""
        close_on_their_loops(self.store)  # gcsfs's and adlfs's finalizers at exit
        try:
            copy = zarr.open_array(self.store, mode="r+", storage_options=self.storage_options)
        except Exception:  # no zarr.json yet (killed first), or unreadable: copied again
            return None
        same = (copy.shape, copy.dtype, copy.chunks) == (shape, dtype, self.chunk_shape)
        return copy if same and copy.shards is None else None

    def write(
        self,
        blocks: da.Array,
        fill_value: Any,
        *,
        bar: PassesBar | None = None,
        resume: bool = False,
    ) -> tuple[zarr.Array[Any], list[tuple[int, ...]]]:
        """Pass 1: copy the source's ``blocks`` (multiples of the chunks) into the copy.

        With ``resume``, a copy of this plan already there keeps the blocks
        whose chunks are all stored (see the module's notes). With ``bar``,
        advance it by one step per block copied.

        Returns
        -------
        tuple of (zarr.Array, list of block indices)
            The copy, and the blocks copied (all, unless some were kept).
        """
        copy = self.open(blocks.shape, blocks.dtype) if resume else None
        todo = list(itertools.product(*(range(n) for n in blocks.numblocks)))
        if copy is None:
            copy = zarr.create_array(
                self.store,
                shape=blocks.shape,
                dtype=blocks.dtype,
                chunks=self.chunk_shape,
                compressors=self.compressors,
                fill_value=fill_value,
                overwrite=True,
                storage_options=self.storage_options,
            )
        else:
            stored = self._stored_chunks()
            todo = [i for i in todo if not self._chunks_of(blocks, i) <= stored]
        if bar is not None:
            bar.start_pass(1, len(todo))
        on_cluster = distributed_client() is not None
        with _BlocksDone(bar) if bar is not None and not on_cluster else nullcontext():
            self._store(blocks, copy, todo, fill_value, bar if on_cluster else None)
        return copy, todo

    @property
    def raw(self) -> bool:
        """Whether the chunks go through :mod:`~shardpipe.rechunking.raw_copy` (no codec)."""
        return self.compressors is None

    def _store(
        self,
        blocks: da.Array,
        copy: zarr.Array[Any],
        todo: list[tuple[int, ...]],
        fill: Any,
        bar: PassesBar | None,
    ) -> None:
        """Store the blocks ``todo`` into the copy (whole chunks each); on a cluster, advance
        ``bar`` as they are stored."""
        if not todo:
            return
        target: Any = copy  # a zarr array, which da.store writes into by its __setitem__
        each = bar.advance if bar is not None else None  # a step per block stored
        if self.raw and stored_raw(copy):
            store_blocks(blocks, self.store, self.chunk_shape, copy.fill_value, todo, each)
            return
        if len(todo) == blocks.npartitions and bar is None:
            stored = da.store(blocks, target, lock=False, compute=False)
        else:  # a store per block: a cluster's bar counts each as it is stored
            sources = [blocks.blocks[i] for i in todo]
            regions = [self._region(blocks, i) for i in todo]
            stored = da.store(
                sources, [target] * len(todo), regions=regions, lock=False, compute=False
            )
        parts = list(stored) if isinstance(stored, tuple) else [stored]  # one per source
        compute_settled(parts, [part.name for part in parts], each)  # da.store's "store-map-..."

    def source(self, copy: zarr.Array[Any], block_shape: Shape) -> da.Array:
        """The copy, once written, as a Dask array of ``block_shape`` blocks (pass 2 reads it)."""
        if self.raw and stored_raw(copy):
            return blocks_of_copy(
                self.store, copy.shape, copy.dtype, self.chunk_shape, block_shape, copy.fill_value
            )
        reader = region_reader(bounded_array(copy))  # many reads in flight on an object store
        if reader is not None:
            return reader.blocks(block_shape)
        blocked: da.Array = da.from_zarr(copy, chunks=block_shape)
        return blocked

    @staticmethod
    def _region(blocks: da.Array, index: tuple[int, ...]) -> tuple[slice, ...]:
        starts = [sum(c[:i]) for c, i in zip(blocks.chunks, index, strict=True)]
        return tuple(
            slice(s, s + c[i]) for s, c, i in zip(starts, blocks.chunks, index, strict=True)
        )

    def _chunks_of(self, blocks: da.Array, index: tuple[int, ...]) -> set[tuple[int, ...]]:
        """The copy's chunks that block ``index`` fills (blocks are whole chunks)."""
        region = self._region(blocks, index)
        ranges = [
            range(r.start // c, ceildiv(r.stop, c))
            for r, c in zip(region, self.chunk_shape, strict=True)
        ]
        return set(itertools.product(*ranges))

    def _stored_chunks(self) -> set[tuple[int, ...]]:
        """Coordinates of the chunks stored in the copy (keys ``c/i/j/...``)."""
        import fsspec

        fs, path = fsspec.core.url_to_fs(self.store, **(self.storage_options or {}))
        root = f"{path.rstrip('/')}/c"
        found = set()
        for key in fs.find(root):
            parts = key[len(root) :].strip("/").split("/")
            if all(p.isdigit() for p in parts):
                found.add(tuple(int(p) for p in parts))
        return found

    def remove(self) -> None:
        """Delete the copy."""
        remove_copy(self.store, self.storage_options)


def remove_copy(store: str, storage_options: dict[str, Any] | None) -> None:
    """Delete the copy at ``store`` (a path or URL), if it is there."""
    import fsspec

    fs, path = fsspec.core.url_to_fs(store, **(storage_options or {}))
    if fs.exists(path):
        fs.rm(path, recursive=True)


class _BlocksDone(Callback):
    """Advances the passes' bar as the first pass stores blocks into the copy."""

    def __init__(self, bar: PassesBar) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.bar = bar

    def _posttask(self, key: Any, result: Any, dsk: Any, state: Any, worker_id: Any) -> None:
        name = key[0] if isinstance(key, tuple) else str(key)
        if name.startswith(("store-map", RAW_COPY_TASK)):
            self.bar.advance()


def placeholder(shape: Shape, dtype: np.dtype[Any], block_shape: Shape) -> da.Array:
    """A lazy array standing for the copy while the second pass is planned (never computed)."""
    planned: da.Array = da.zeros(shape, dtype=dtype, chunks=block_shape)
    return planned
