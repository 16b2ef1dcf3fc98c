"""Anchor "writers" that bound what any sharded writer can reach on this machine.

* :class:`EncodeOnly` encodes every inner chunk through the inner codec chain
  (bytes little-endian, then zstd level 1 or nothing) on all cores, no I/O.
* :class:`RawWrite` writes the raw volume bytes to shard-sized files on all
  cores with plain Python file writes, no encoding.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.base import VerificationError, Writer, WriterUnavailable, n_threads
from benchmarks.data import Layout


def _numcodecs_compressor(codec: str) -> Any:
    """Return the numcodecs codec zarr's ``ZstdCodec`` uses, or None for ``none``."""
    from numcodecs import Zstd  # type: ignore[import-untyped]

    if codec == "zstd1":
        return Zstd(level=1, checksum=False)
    if codec == "none":
        return None
    raise ValueError(f"unknown codec setting {codec!r}")


def _chunk_bytes(chunk: np.ndarray) -> np.ndarray:
    """Apply the ``bytes`` codec (little-endian, C order): a contiguous copy."""
    return np.ascontiguousarray(chunk, dtype=chunk.dtype.newbyteorder("<"))


class EncodeOnly(Writer):
    """Encode all inner chunks with a thread per core; nothing is written.

    Work is split per shard: each task copies its inner chunks out of the
    volume and compresses them (numcodecs releases the GIL). Only the encoded
    sizes are kept, so the encoded data does not inflate peak memory.
    """

    name = "encode"
    label = "encode-only limit"

    def load(self) -> None:
        """Import numcodecs."""
        try:
            import numcodecs  # noqa: F401
        except ImportError as exc:
            raise WriterUnavailable(f"numcodecs not importable: {exc}") from exc
        self.encoded_bytes = 0

    def _encoder(self, codec: str) -> Callable[[np.ndarray], int]:
        """Return a function mapping a chunk to its encoded size."""
        compressor = _numcodecs_compressor(codec)
        if compressor is None:
            return lambda chunk: _chunk_bytes(chunk).nbytes
        return lambda chunk: len(compressor.encode(_chunk_bytes(chunk)))

    def write(self, source: Any, path: Path, layout: Layout, codec: str) -> None:
        """Encode every inner chunk of ``source`` (``path`` is unused)."""
        encode = self._encoder(codec)

        def encode_shard(region: tuple[slice, ...]) -> int:
            return sum(encode(source[chunk]) for chunk in layout.chunk_slices(region))

        with ThreadPoolExecutor(max_workers=n_threads()) as pool:
            self.encoded_bytes = sum(pool.map(encode_shard, layout.shard_slices()))
        self.notes = [f"{n_threads()} threads, per-shard tasks, no I/O"]

    def verify(self, path: Path, volume: np.ndarray, layout: Layout, codec: str) -> int:
        """Round-trip every chunk and compare the encoded total with the timed run."""
        compressor = _numcodecs_compressor(codec)
        total = 0
        for region in layout.shard_slices():
            for chunk in layout.chunk_slices(region):
                raw = _chunk_bytes(volume[chunk])
                if compressor is None:
                    total += raw.nbytes
                    continue
                encoded = compressor.encode(raw)
                total += len(encoded)
                decoded = np.frombuffer(compressor.decode(encoded), dtype=raw.dtype)
                if not np.array_equal(decoded.reshape(raw.shape), raw):
                    raise VerificationError(f"encode-only: chunk {chunk} does not round-trip")
        if total != self.encoded_bytes:
            raise VerificationError(
                f"encode-only: timed run produced {self.encoded_bytes} bytes, "
                f"verification pass {total}"
            )
        return total


class RawWrite(Writer):
    """Write the raw volume bytes to one file per shard with plain Python writes.

    The C-ordered volume is cut into ``n_shards`` contiguous pieces of shard
    size (16 MiB for the default layout); each thread opens a file and writes a
    piece from a memoryview (no copy). The codec setting is ignored.
    """

    name = "raw"
    label = "raw-write limit"

    def load(self) -> None:
        """Nothing to import: only the standard library is used."""

    def _pieces(self, source: np.ndarray, layout: Layout) -> list[memoryview]:
        """Cut the volume's bytes into shard-sized contiguous pieces."""
        flat = memoryview(np.ascontiguousarray(source)).cast("B")
        step = -(-flat.nbytes // layout.n_shards)
        return [flat[start : start + step] for start in range(0, flat.nbytes, step)]

    def write(self, source: Any, path: Path, layout: Layout, codec: str) -> None:
        """Write the pieces to ``path/<index>`` with a thread per core."""
        path.mkdir(parents=True)
        pieces = self._pieces(source, layout)

        def put(index: int) -> None:
            with open(path / str(index), "wb") as out:
                out.write(pieces[index])

        with ThreadPoolExecutor(max_workers=n_threads()) as pool:
            list(pool.map(put, range(len(pieces))))
        self.notes = [f"{len(pieces)} files x {pieces[0].nbytes / 2**20:.0f} MiB, no fsync"]

    def verify(self, path: Path, volume: np.ndarray, layout: Layout, codec: str) -> int:
        """Read every file back and compare it with its piece of the volume."""
        pieces = self._pieces(volume, layout)
        total = 0
        for index, piece in enumerate(pieces):
            data = (path / str(index)).read_bytes()
            if data != piece:
                raise VerificationError(f"raw-write: file {index} differs from the volume")
            total += len(data)
        return total
