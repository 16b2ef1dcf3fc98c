"""The sharded Zarr v3 writers under test, and the registry of all writers.

Each writer produces the same array: shape of the volume, ``uint16``, shards
(128, 256, 256) of (64, 64, 64) inner chunks, inner codecs bytes(little) plus
zstd level 1 or nothing, index codecs bytes + crc32c at the end, fill value 0.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from benchmarks.base import (
    Writer,
    WriterUnavailable,
    WriterUnsupported,
    n_threads,
    zarr_compressors,
)
from benchmarks.data import Layout
from benchmarks.limits import EncodeOnly, RawWrite
from benchmarks.verify import verify_zarr

ZARRS_CONFIG: dict[str, Any] = {
    "codec_pipeline.path": "zarrs.ZarrsCodecPipeline",
    # Raise instead of silently falling back to zarr-python's own pipeline.
    "codec_pipeline.strict": True,
}


def create_zarr_target(path: Path, layout: Layout, codec: str) -> Any:
    """Create the empty sharded target array with zarr-python.

    Parameters
    ----------
    path : pathlib.Path
        Local directory of the new array (replaced if it exists).
    layout : Layout
        Target layout.
    codec : {"zstd1", "none"}
        Codec setting.

    Returns
    -------
    zarr.Array
        The new array, using the codec pipeline configured at call time.
    """
    import zarr

    return zarr.create_array(
        store=str(path),
        shape=layout.shape,
        dtype=layout.dtype,
        chunks=layout.chunks,
        shards=layout.shards,
        compressors=zarr_compressors(codec),
        overwrite=True,
    )


class ZarrOutput(Writer):
    """Base for writers whose output is checked with :func:`verify_zarr`."""

    def verify(self, path: Path, volume: np.ndarray, layout: Layout, codec: str) -> int:
        """Read the array back with zarr-python and compare it with the volume."""
        return verify_zarr(path, volume, layout, codec)


class DaskToZarr(ZarrOutput):
    """``zarr.create_array`` (sharded) then ``dask.array.to_zarr(x, array)``.

    Runs on Dask's default threaded scheduler. ``to_zarr`` into an existing
    sharded array rechunks the Dask array to "auto" blocks that are multiples
    of the shard shape before storing, so every task writes whole shards.
    """

    name = "dask"
    label = "dask to_zarr"
    uses_blocks = True
    zarr_config: ClassVar[dict[str, Any]] = {}

    def load(self) -> None:
        """Import dask.array and zarr."""
        try:
            import dask.array  # noqa: F401
            import zarr  # noqa: F401
        except ImportError as exc:
            raise WriterUnavailable(f"dask/zarr not importable: {exc}") from exc

    def prepare(self, volume: np.ndarray, layout: Layout, blocks: tuple[int, ...] | None) -> Any:
        """Wrap the volume with ``dask.array.from_array`` in the given blocks."""
        import dask.array as da

        x = da.from_array(volume, chunks=blocks)
        write_blocks = da.core.normalize_chunks(
            "auto", shape=layout.shape, dtype=volume.dtype, previous_chunks=layout.shards
        )
        self.notes = [
            f"{x.npartitions} input blocks; to_zarr rechunks to {tuple(c[0] for c in write_blocks)}"
        ]
        return x

    def write(self, source: Any, path: Path, layout: Layout, codec: str) -> None:
        """Create the array and store the Dask array into it."""
        import dask.array as da
        import zarr

        with zarr.config.set(self.zarr_config):
            target = create_zarr_target(path, layout, codec)
            self.check_pipeline(target)
            da.to_zarr(source, target)

    def check_pipeline(self, target: Any) -> None:
        """Hook to assert which codec pipeline the target array uses."""


class ZarrsToZarr(DaskToZarr):
    """As :class:`DaskToZarr` with zarr-python's codec pipeline set to zarrs."""

    name = "zarrs"
    label = "dask to_zarr + zarrs"
    zarr_config: ClassVar[dict[str, Any]] = ZARRS_CONFIG

    def load(self) -> None:
        """Import dask.array, zarr and zarrs."""
        super().load()
        try:
            import zarrs  # noqa: F401
        except ImportError as exc:
            raise WriterUnavailable(f"zarrs not importable: {exc}") from exc

    def check_pipeline(self, target: Any) -> None:
        """Fail if the array did not pick up the zarrs codec pipeline."""
        pipeline = type(target.async_array.codec_pipeline).__name__
        if pipeline != "ZarrsCodecPipeline":
            raise RuntimeError(f"zarrs pipeline not active (got {pipeline})")


def tensorstore_metadata(layout: Layout, codec: str) -> dict[str, Any]:
    """Return zarr3-driver metadata identical to what zarr-python writes.

    Parameters
    ----------
    layout : Layout
        Target layout.
    codec : {"zstd1", "none"}
        Codec setting.

    Returns
    -------
    dict
        Zarr v3 array metadata (JSON-compatible).
    """
    inner: list[dict[str, Any]] = [{"name": "bytes", "configuration": {"endian": "little"}}]
    if codec == "zstd1":
        inner.append({"name": "zstd", "configuration": {"level": 1, "checksum": False}})
    return {
        "shape": list(layout.shape),
        "data_type": "uint16",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(layout.shards)}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0,
        "codecs": [
            {
                "name": "sharding_indexed",
                "configuration": {
                    "chunk_shape": list(layout.chunks),
                    "codecs": inner,
                    "index_codecs": [
                        {"name": "bytes", "configuration": {"endian": "little"}},
                        {"name": "crc32c"},
                    ],
                    "index_location": "end",
                },
            }
        ],
    }


class TensorStoreWriter(ZarrOutput):
    """TensorStore ``zarr3`` driver: one concurrent write per shard region.

    All per-shard writes are issued before waiting on any, without a
    transaction (each covers a whole shard, so no read-modify-write).
    ``file_io_sync`` is off because no other writer fsyncs.
    """

    name = "tensorstore"
    label = "tensorstore"

    def load(self) -> None:
        """Import tensorstore."""
        try:
            import tensorstore  # noqa: F401
        except ImportError as exc:
            raise WriterUnavailable(f"tensorstore not importable: {exc}") from exc

    def write(self, source: Any, path: Path, layout: Layout, codec: str) -> None:
        """Create the array and write the NumPy volume shard by shard."""
        import tensorstore as ts

        spec = {
            "driver": "zarr3",
            "kvstore": {"driver": "file", "path": str(path)},
            "metadata": tensorstore_metadata(layout, codec),
            "context": {"file_io_sync": False},
        }
        array = ts.open(spec, create=True, delete_existing=True).result()
        futures = [array[region].write(source[region]) for region in layout.shard_slices()]
        for future in futures:
            future.result()
        self.notes = [f"{len(futures)} concurrent per-shard writes, file_io_sync off"]


class CubedWriter(ZarrOutput):
    """cubed: ``cubed.store`` of ``cubed.from_array`` into a sharded zarr-python array.

    Uses cubed's ``threads`` executor with one worker per core and source
    chunks equal to the shard shape (measured once, not per Dask block case).
    """

    name = "cubed"
    label = "cubed store"

    def load(self) -> None:
        """Import cubed and zarr."""
        try:
            import cubed  # noqa: F401
            import zarr  # noqa: F401
        except ImportError as exc:
            raise WriterUnavailable(f"cubed not importable: {exc}") from exc

    def prepare(self, volume: np.ndarray, layout: Layout, blocks: tuple[int, ...] | None) -> Any:
        """Wrap the volume with ``cubed.from_array`` in shard-shaped chunks."""
        import cubed

        spec = cubed.Spec(
            work_dir=str(self.scratch / "cubed-work"),
            allowed_mem="2GB",
            reserved_mem="100MB",
            executor_name="threads",
            executor_options={"max_workers": n_threads()},
        )
        return cubed.from_array(volume, chunks=layout.shards, spec=spec)

    def write(self, source: Any, path: Path, layout: Layout, codec: str) -> None:
        """Create the sharded array with zarr-python and ``cubed.store`` into it."""
        import cubed

        target = create_zarr_target(path, layout, codec)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                cubed.store(source, target)
            except Exception as exc:
                raise WriterUnsupported(f"cubed.store into a sharded array: {exc!r}") from exc
        self.notes = [f"threads executor x{n_threads()}, source chunks = shards"]
        aligned = tuple(source.chunksize) == tuple(layout.shards)
        for w in caught:
            spurious = aligned and "mismatch between the shard and chunk size" in str(w.message)
            suffix = " (spurious: source chunks already equal the shards)" if spurious else ""
            self.notes.append(f"warning: {w.message}{suffix}")


class ShardpipeWriter(DaskToZarr):
    """``shardpipe.to_sharded_zarr`` on the Dask array (default scheduler)."""

    name = "shardpipe"
    label = "shardpipe"

    def load(self) -> None:
        """Import shardpipe; report it as unavailable if that fails."""
        super().load()
        try:
            from shardpipe import to_sharded_zarr
        except Exception as exc:
            raise WriterUnavailable(f"shardpipe not importable yet: {exc!r}") from exc
        self._to_sharded_zarr = to_sharded_zarr

    def prepare(self, volume: np.ndarray, layout: Layout, blocks: tuple[int, ...] | None) -> Any:
        """Wrap the volume with ``dask.array.from_array`` in the given blocks."""
        x = super().prepare(volume, layout, blocks)
        self.notes = [f"{x.npartitions} input blocks"]
        return x

    fsync = True

    def write(self, source: Any, path: Path, layout: Layout, codec: str) -> None:
        """Call ``to_sharded_zarr`` with the benchmark layout and codec."""
        self._to_sharded_zarr(
            source,
            str(path),
            shards=layout.shards,
            chunks=layout.chunks,
            compressors=zarr_compressors(codec),
            overwrite=True,
            storage_options={"fsync": self.fsync},
        )


class ShardpipeNoFsyncWriter(ShardpipeWriter):
    """shardpipe without ``fsync``: atomic but not durable, like every other writer here."""

    name = "shardpipe-nofsync"
    label = "shardpipe (no fsync)"
    fsync = False


WRITERS: dict[str, type[Writer]] = {
    cls.name: cls
    for cls in (
        EncodeOnly,
        RawWrite,
        DaskToZarr,
        ZarrsToZarr,
        TensorStoreWriter,
        CubedWriter,
        ShardpipeWriter,
        ShardpipeNoFsyncWriter,
    )
}
"""All writers by command-line name, in report order."""
