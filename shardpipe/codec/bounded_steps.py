"""One decompression step of a codec chain, bounded by the size it may produce.

A chain's compressor is named in array metadata (``"gzip"``, ``"zstd"``,
``"blosc"``; zarr v3's ``"numcodecs.bz2"``...) or, in a Zarr v2 array, by
its numcodecs id (``"bz2"``). :func:`step_kind` turns either into one
kind, and :func:`bounded_step` decodes a step of that kind without ever
holding more than the bytes the step may produce:

* ``gzip``, ``zlib``, ``bz2``, ``lzma``: decompressed here, stopping one
  byte past the bound (:mod:`shardpipe.codec.bounded`);
* ``blosc`` and ``lz4``: the decoded size their header declares is checked
  first; the codec then allocates what was checked;
* ``zstd``: what the frames declare (content size, raw and RLE blocks) is
  checked (:mod:`shardpipe.codec.zstd_frames`); frames that declare no
  content size are decoded into a buffer of the step's size, so they cannot
  produce more.

Any other kind (a filter, a checksum, a codec shardpipe does not know) is
left to its codec: :data:`BOUNDED_KINDS` says which kinds are bounded.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numcodecs import Zstd  # type: ignore[import-untyped]

from shardpipe.codec.bounded import (
    bunzip2,
    check_blosc_header,
    check_lz4_header,
    gunzip,
    unlzma,
    unzlib,
)
from shardpipe.codec.zstd_frames import zstd_frames
from shardpipe.errors import ChunkDecodeError

__all__ = ["BOUNDED_KINDS", "INTO_KINDS", "bounded_step", "decode_step_into", "step_kind"]

DECOMPRESSED_HERE = frozenset({"gzip", "zlib", "bz2", "lzma"})
"""Kinds decompressed by :func:`bounded_step` itself."""

BOUNDED_KINDS = DECOMPRESSED_HERE | {"blosc", "lz4", "zstd"}
"""Kinds whose decoding :func:`bounded_step` bounds."""

INTO_KINDS = frozenset({"", "zstd", "blosc"})
"""Kinds :func:`decode_step_into` decodes into a given buffer (``""``: no compressor)."""

NUMCODECS_LZMA_FORMAT = 1
"""numcodecs' ``LZMA`` writes ``lzma.FORMAT_XZ`` unless its ``format`` says otherwise."""


def step_kind(name: str) -> str:
    """The kind of the codec ``name``: a v3 name without ``numcodecs.``, or a v2 numcodecs id."""
    return name.removeprefix("numcodecs.")


def bounded_step(
    kind: str,
    configuration: Mapping[str, Any],
    raw: np.ndarray,
    size: int | None,
    limit: int,
) -> np.ndarray | bytes | None:
    """Decode one step of ``kind``, bounded; None when its codec is to run after the checks.

    Parameters
    ----------
    kind : str
        See :func:`step_kind`.
    configuration : mapping
        The codec's configuration (``format`` and ``filters`` of ``lzma``).
    raw : numpy.ndarray
        The step's input, 1-D ``uint8``.
    size : int or None
        Bytes the step must produce, when the codecs before it fix them.
    limit : int
        Most bytes it may produce when ``size`` is None.

    Returns
    -------
    numpy.ndarray, bytes or None
        The decoded bytes; None for a kind whose codec now runs (its
        allocation checked: ``blosc``, ``lz4``, ``zstd`` declaring its
        content size) or that is not bounded here (not in :data:`BOUNDED_KINDS`).

    Raises
    ------
    shardpipe.errors.ChunkDecodeError
        If the data would decode to more than the step may produce, or is
        not valid data of its kind.
    """
    bound = limit if size is None else size
    if kind == "gzip":
        return gunzip(raw, bound)
    if kind == "zlib":
        return unzlib(raw, bound)
    if kind == "bz2":
        return bunzip2(raw, bound)
    if kind == "lzma":
        return unlzma(
            raw,
            bound,
            format=int(configuration.get("format", NUMCODECS_LZMA_FORMAT)),
            filters=configuration.get("filters"),
        )
    if kind == "blosc":
        check_blosc_header(raw, bound, exact=size is not None)
    elif kind == "lz4":
        check_lz4_header(raw, bound, exact=size is not None)
    elif kind == "zstd":
        return _zstd_step(raw, size, limit)
    return None


def _zstd_step(raw: np.ndarray, size: int | None, limit: int) -> np.ndarray | None:
    """Check what zstd frames declare against ``size`` (or ``limit``); decode those that do not.

    A frame claiming 2**40 bytes is refused, never allocated. Frames that
    declare no content size are decoded into a buffer of ``size`` bytes;
    where ``size`` is not known they cannot be decoded within a bound.
    """
    frames = zstd_frames(raw.data)
    which = "zstd frame declares" if frames.frames == 1 else "zstd frames declare"
    if size is None:
        if frames.declared is None:  # nothing bounds what it would inflate to
            raise ChunkDecodeError(
                "a zstd frame declares no content size where the chunk's size at that "
                "step is not known: it cannot be decoded within a bound"
            )
        if frames.declared > limit:
            raise ChunkDecodeError(
                f"{which} {frames.declared} bytes of content, more than the {limit} an "
                "inner chunk can take at that step"
            )
    elif frames.declared is not None and frames.declared != size:
        raise ChunkDecodeError(
            f"{which} {frames.declared} bytes of content, the chunk holds {size}"
        )
    elif frames.least > size:
        raise ChunkDecodeError(
            f"zstd blocks hold at least {frames.least} bytes of content, the chunk holds {size}"
        )
    if frames.declared is None and size is not None:
        out = np.empty(size, dtype=np.uint8)  # bounded: never more than the chunk's size
        Zstd().decode(raw, out=out)
        return out
    return None


def decode_step_into(kind: str, raw: np.ndarray, out: np.ndarray) -> bool:
    """Decode one step of ``kind`` into ``out``, which it must fill exactly; whether it did.

    The caller's buffer takes the bytes, so no buffer of the decoder's own
    is filled and copied. Only where the input says how much it holds and
    that is ``out``'s size: no compressor (``kind`` ``""``), zstd frames
    that declare their content size, a blosc header; False (nothing done)
    for zstd input of no declared size or of several frames, which
    :func:`bounded_step` and the codec decode.

    Parameters
    ----------
    kind : str
        One of :data:`INTO_KINDS`.
    raw : numpy.ndarray
        The step's input, 1-D ``uint8``.
    out : numpy.ndarray
        1-D ``uint8``, C-contiguous: the chunk's bytes after the step.

    Raises
    ------
    shardpipe.errors.ChunkDecodeError
        If the input holds another size than ``out`` or is not valid data of
        its kind.
    """
    size = out.size
    if kind == "":
        if raw.size != size:
            raise ChunkDecodeError(f"holds {raw.size} bytes where the chunk holds {size}")
        out[...] = raw
        return True
    if kind == "blosc":
        from numcodecs import Blosc

        check_blosc_header(raw, size, exact=True)
        Blosc().decode(raw, out=out)
        return True
    frames = zstd_frames(raw.data)
    if frames.declared is None or frames.frames != 1:
        return False
    if frames.declared != size:
        which = "zstd frame declares" if frames.frames == 1 else "zstd frames declare"
        raise ChunkDecodeError(
            f"{which} {frames.declared} bytes of content, the chunk holds {size}"
        )
    Zstd().decode(raw, out=out)
    return True
