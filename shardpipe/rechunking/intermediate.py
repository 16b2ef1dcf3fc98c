"""The intermediate copy of a two-pass rechunk: write it, read it, remove it.

When the blocks a one-pass rechunk can afford are thinner than the target's
inner chunks (:func:`~shardpipe.core.source_blocks.straddles`), each shard is
gathered from raw pieces of many blocks, which wait in memory until the
shard's last block is read. With ``temp_store``, the rechunk goes in two
passes instead: the first copies the source, block by block, into an
unsharded Zarr v3 array whose chunks those blocks fill whole
(:func:`~shardpipe.core.source_blocks.intermediate_chunks`); the second reads that
copy in blocks of whole inner chunks, which are written part by part as they
are read. The copy is deleted when the second pass succeeds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import dask.array as da
import numpy as np
import zarr
from dask.callbacks import Callback
from zarr.codecs import ZstdCodec

from shardpipe.core.display import format_bytes
from shardpipe.core.grid import Shape
from shardpipe.core.source_blocks import ReadCost
from shardpipe.engine.progress import PassesBar
from shardpipe.engine.scheduler import distributed_client


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
    """

    store: str
    storage_options: dict[str, Any] | None
    chunk_shape: Shape
    block_shape: Shape
    cost: ReadCost

    def describe(self) -> str:
        """A line for the plan's summary."""
        return (
            f"{self.store}: {format_bytes(self.cost.nbytes_source)} raw in chunks "
            f"{self.chunk_shape}; pass 1 reads the source in blocks of {self.block_shape} "
            f"({self.cost.reads:,} reads, amplification {self.cost.amplification:.2f}x); "
            "deleted afterwards"
        )

    def write(
        self, blocks: da.Array, fill_value: Any, *, bar: PassesBar | None = None
    ) -> zarr.Array[Any]:
        """Pass 1: copy the source's ``blocks`` (multiples of the chunks) into the copy.

        With ``bar``, advance it by one step per block copied (on Dask's
        local schedulers; on a ``distributed`` client, its dashboard shows
        the blocks, and the bar moves on when the pass ends).
        """
        copy = zarr.create_array(
            self.store,
            shape=blocks.shape,
            dtype=blocks.dtype,
            chunks=self.chunk_shape,
            compressors=ZstdCodec(level=1),
            fill_value=fill_value,
            overwrite=True,
            storage_options=self.storage_options,
        )
        if bar is None or distributed_client() is not None:
            da.store(blocks, cast(Any, copy), lock=False)
        else:
            with _BlocksDone(bar):
                da.store(blocks, cast(Any, copy), lock=False)
        return copy

    def remove(self) -> None:
        """Delete the copy."""
        import fsspec

        fs, path = fsspec.core.url_to_fs(self.store, **(self.storage_options or {}))
        if fs.exists(path):
            fs.rm(path, recursive=True)


class _BlocksDone(Callback):
    """Advances the passes' bar as the first pass stores blocks into the copy."""

    def __init__(self, bar: PassesBar) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.bar = bar

    def _posttask(self, key: Any, result: Any, dsk: Any, state: Any, worker_id: Any) -> None:
        name = key[0] if isinstance(key, tuple) else str(key)
        if name.startswith("store-map"):
            self.bar.advance()


def placeholder(shape: Shape, dtype: np.dtype[Any], block_shape: Shape) -> da.Array:
    """A lazy array standing for the copy while the second pass is planned (never computed)."""
    planned: da.Array = da.zeros(shape, dtype=dtype, chunks=block_shape)
    return planned
