"""The compressors of a new array: with a checksum of every inner chunk, never two.

:func:`checksummed_compressors` is the one place that decides the compressors
of a new array (every front-end calls it): with ``chunk_checksums`` (the
default) zarr's ``crc32c`` codec ends the chain, so zarr-python, tensorstore
and zarrs refuse a chunk whose bytes changed. :func:`has_chunk_checksum` says
whether a chain already checks every chunk.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import zarr
from zarr.abc.codec import BytesBytesCodec, Codec
from zarr.codecs import Crc32cCodec, ZstdCodec
from zarr.storage import MemoryStore

from shardpipe.errors import InvalidArgumentError

__all__ = ["checksummed_compressors", "has_chunk_checksum"]


def has_chunk_checksum(compressors: Sequence[Codec]) -> bool:
    """Whether bytes-to-bytes ``compressors`` check every chunk's bytes when decoded.

    True when they hold zarr's ``crc32c`` codec, or end with ``zstd`` with
    ``checksum=True`` (zstd then checks its frames itself).
    """
    if any(isinstance(c, Crc32cCodec) for c in compressors):
        return True
    return bool(compressors) and isinstance(compressors[-1], ZstdCodec) and compressors[-1].checksum


def checksummed_compressors(compressors: Any, dtype: Any, *, chunk_checksums: bool) -> Any:
    """The ``compressors`` of a new array: with ``chunk_checksums``, ending with ``crc32c``.

    Every front-end that creates arrays (``prepare_write``, so
    ``to_sharded_zarr`` and the rechunks, and the xarray accessor) passes its
    ``compressors`` through here.

    Parameters
    ----------
    compressors : Any
        As in ``zarr.create_array``: ``"auto"`` (zarr's default for the
        dtype, zstd), a codec, a dict, a sequence of them, or None.
    dtype : numpy dtype or str
        The stored dtype (zarr's ``"auto"`` depends on it).
    chunk_checksums : bool
        Append zarr's ``crc32c`` codec. When the compressors already check
        every chunk (:func:`has_chunk_checksum`: a ``crc32c`` anywhere in
        them, or a final ``zstd`` with ``checksum=True``) they are returned
        unchanged: never two checksums.

    Returns
    -------
    Any
        ``compressors`` unchanged, or zarr's resolution of them (codec
        objects) followed by ``Crc32cCodec()``.

    Raises
    ------
    InvalidArgumentError
        If zarr rejects ``compressors``.
    """
    if not chunk_checksums:
        return compressors
    resolved = _codec_objects(compressors)
    if resolved is None:
        try:
            probe = zarr.create_array(
                MemoryStore(), shape=(1,), dtype=dtype, chunks=(1,), compressors=compressors
            )
        except (TypeError, ValueError) as err:
            raise InvalidArgumentError(
                "compressors",
                f"zarr rejects {compressors!r} ({err})",
                "Pass codec objects or dicts as accepted by zarr.create_array",
            ) from err
        resolved = tuple(c for c in probe.compressors if isinstance(c, BytesBytesCodec))
    if has_chunk_checksum(resolved):
        return compressors
    return (*resolved, Crc32cCodec())


def _codec_objects(compressors: Any) -> tuple[BytesBytesCodec, ...] | None:
    """``compressors`` as zarr resolves them, where that needs no zarr (else None).

    None and codec objects are what zarr keeps as they are; ``"auto"`` and
    dicts are left to zarr (:func:`checksummed_compressors` asks it, in memory).
    """
    if compressors is None:
        return ()
    if isinstance(compressors, BytesBytesCodec):
        return (compressors,)
    if isinstance(compressors, (list, tuple)) and all(
        isinstance(c, BytesBytesCodec) for c in compressors
    ):
        return tuple(compressors)
    return None
