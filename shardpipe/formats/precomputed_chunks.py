"""Chunk encodings of precomputed volumes: ``raw``, ``jpeg``, ``compressed_segmentation``.

A chunk is an ``(x, y, z, channel)`` array, truncated at the volume's end.

* ``raw``: the voxels with x varying fastest, then y, z, channel (the
  array in Fortran order), little endian; any data type.
* ``jpeg``: ``uint8`` with 1 or 3 channels; one JPEG image ``x`` pixels
  wide and ``y * z`` high (the z slices one under the other), grey or RGB
  with interleaved channels (``simplejpeg``), as tensorstore reads them.
  Lossy. (cloud-volume 12.15 reads 3-channel jpeg chunks in another pixel
  order, so its values differ from tensorstore's for them.)
* ``compressed_segmentation``: ``uint32`` or ``uint64`` labels, any number
  of channels, compressed in blocks (``compressed_segmentation_block_size``
  in the scale's ``info``, 8 x 8 x 8 here). Each channel is compressed on
  its own with the ``compressed-segmentation`` package; the chunk is one
  32-bit word per channel, the offset (in words, from the chunk's start)
  of that channel's data, followed by the channels' data. (The package's
  own four-dimensional call crashed or wrote channels that did not read
  back right in Fortran order.)

``jpeg`` and ``compressed_segmentation`` need the ``neuroglancer`` extra
(``pip install "shardpipe[neuroglancer]"``).
"""

from __future__ import annotations

import math
from collections.abc import Buffer
from typing import Any

import numpy as np

from shardpipe.errors import InvalidArgumentError

ENCODINGS = ("raw", "jpeg", "compressed_segmentation")
CSEG_BLOCK = (8, 8, 8)
JPEG_QUALITY = 85


def check_encoding(encoding: Any, dtype: np.dtype[Any], channels: int) -> str:
    """Refuse an encoding the data cannot take, or whose package is missing; return it."""
    if encoding not in ENCODINGS:
        raise InvalidArgumentError(
            "encoding",
            f"{encoding!r} is not a precomputed chunk encoding {ENCODINGS}",
            "Use 'raw' (with sharding data_encoding 'gzip' to compress)",
        )
    if encoding == "jpeg" and (dtype != np.uint8 or channels not in (1, 3)):
        raise InvalidArgumentError(
            "encoding",
            f"'jpeg' takes uint8 images of 1 or 3 channels, not {dtype} with {channels}",
            "Use encoding='raw', or cast to uint8",
        )
    if encoding == "compressed_segmentation" and dtype not in (np.uint32, np.uint64):
        raise InvalidArgumentError(
            "encoding",
            f"'compressed_segmentation' takes uint32 or uint64 labels, not {dtype}",
            "Use encoding='raw', or cast the labels to uint32 or uint64",
        )
    package = {"jpeg": "simplejpeg", "compressed_segmentation": "compressed_segmentation"}
    if encoding in package:
        try:
            __import__(package[encoding])
        except ImportError:
            raise InvalidArgumentError(
                "encoding",
                f"{encoding!r} needs the {package[encoding]} package, which is not installed",
                'Install it with pip install "shardpipe[neuroglancer]"',
            ) from None
    return str(encoding)


def max_encoded_nbytes(shape: tuple[int, ...], dtype: np.dtype[Any], encoding: str) -> int:
    """Most bytes a chunk of ``shape`` can take in ``encoding`` (bounds its decompression).

    ``raw``: exactly its voxels' bytes. ``jpeg`` and ``compressed_segmentation``
    stay well within three times that plus 64 KiB (a segmentation block
    stores at most a table of its values and 32 bits per voxel, with an
    8-byte header).
    """
    nbytes = math.prod(shape) * dtype.itemsize
    return nbytes if encoding == "raw" else 3 * nbytes + (64 << 10)


def encode_chunk(chunk: np.ndarray, encoding: str) -> Buffer:
    """The bytes of an ``(x, y, z, channel)`` chunk in ``encoding``.

    For ``raw``, a Fortran-ordered little-endian ``chunk`` is not copied.
    """
    if encoding == "raw":
        if not chunk.flags.f_contiguous or chunk.dtype.byteorder == ">":
            chunk = np.asfortranarray(chunk.astype(chunk.dtype.newbyteorder("<"), copy=False))
        return memoryview(chunk.reshape(-1, order="F")).cast("B")
    if encoding == "jpeg":
        import simplejpeg

        nx, ny, nz, channels = chunk.shape
        image = np.ascontiguousarray(chunk.transpose(2, 1, 0, 3).reshape(nz * ny, nx, channels))
        encoded: bytes = simplejpeg.encode_jpeg(
            image,
            quality=JPEG_QUALITY,
            colorspace="GRAY" if channels == 1 else "RGB",
            colorsubsampling="Gray" if channels == 1 else "444",
        )
        return encoded
    import compressed_segmentation

    channels = chunk.shape[3]
    words = []
    for c in range(channels):  # each channel alone: a one-word header (1), then its data
        one = compressed_segmentation.compress(
            np.asfortranarray(chunk[..., c]), block_size=CSEG_BLOCK, order="F"
        )
        words.append(np.frombuffer(one, dtype="<u4")[1:])
    offsets = np.cumsum([channels] + [len(w) for w in words[:-1]], dtype="<u4")
    return b"".join([offsets.tobytes(), *(w.tobytes() for w in words)])


def decode_chunk(
    data: bytes,
    encoding: str,
    shape: tuple[int, ...],
    dtype: np.dtype[Any],
    block_size: tuple[int, ...] = CSEG_BLOCK,
) -> np.ndarray:
    """The ``(x, y, z, channel)`` array of a chunk's bytes (raises on bytes that do not decode).

    ``block_size`` is the ``compressed_segmentation`` block size of the scale.
    """
    if encoding == "raw":
        expected = int(np.prod(shape)) * dtype.itemsize
        if len(data) != expected:
            raise ValueError(f"{len(data)} bytes, the chunk's box holds {expected}")
        return np.frombuffer(data, dtype=dtype.newbyteorder("<")).reshape(shape, order="F")
    if encoding == "jpeg":
        import simplejpeg

        nx, ny, nz, channels = shape
        image = simplejpeg.decode_jpeg(data, colorspace="GRAY" if channels == 1 else "RGB")
        if image.shape[:2] != (nz * ny, nx):
            raise ValueError(f"a {image.shape[:2]} image, the chunk is {(nz * ny, nx)}")
        decoded: np.ndarray = image.reshape(nz, ny, nx, channels).transpose(2, 1, 0, 3)
        return decoded
    if encoding != "compressed_segmentation":
        raise ValueError(f"shardpipe does not decode {encoding!r} chunks")
    import compressed_segmentation

    channels = shape[3]
    words = np.frombuffer(data, dtype="<u4")
    starts = words[:channels].tolist()
    stops = [*starts[1:], len(words)]
    if len(starts) != channels or not all(
        channels <= a <= b for a, b in zip(starts, stops, strict=True)
    ):
        raise ValueError(f"channel offsets {starts} do not fit {len(words)} words")
    labels = np.empty(shape, dtype=dtype, order="F")
    for c, (start, stop) in enumerate(zip(starts, stops, strict=True)):
        one = b"".join([np.array([1], dtype="<u4").tobytes(), words[start:stop].tobytes()])
        labels[..., c] = compressed_segmentation.decompress(
            one, (*shape[:3], 1), dtype, block_size=block_size, order="F"
        ).reshape(shape[:3], order="F")
    return labels
