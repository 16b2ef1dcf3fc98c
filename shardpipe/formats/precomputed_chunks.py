"""Chunk encodings of precomputed volumes: ``raw``, ``jpeg``, ``compressed_segmentation``.

A chunk is an ``(x, y, z, channel)`` array, truncated at the volume's end.

* ``raw``: the voxels with x varying fastest, then y, z, channel (the
  array in Fortran order), little endian; any data type.
* ``jpeg``: ``uint8`` with 1 or 3 channels; one JPEG image ``x`` pixels
  wide and ``y * z`` high (the z slices one under the other), grey or RGB
  with interleaved channels (``simplejpeg``), as tensorstore reads them.
  Lossy. (cloud-volume 12.15 reads 3-channel jpeg chunks in another pixel
  order, so its values differ from tensorstore's for them.)
* ``compressed_segmentation``: one channel of ``uint32`` or ``uint64``
  labels, compressed in blocks (``compressed_segmentation_block_size`` in
  the scale's ``info``, 8 x 8 x 8 here), with the ``compressed-segmentation``
  package. Several channels are refused: written through that package they
  did not read back right (tensorstore and cloud-volume agreed with each
  other, not with the data), and cloud-volume writes one channel only.

``jpeg`` and ``compressed_segmentation`` need the ``neuroglancer`` extra
(``pip install "shardpipe[neuroglancer]"``).
"""

from __future__ import annotations

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
    if encoding == "compressed_segmentation" and (
        dtype not in (np.uint32, np.uint64) or channels != 1
    ):
        raise InvalidArgumentError(
            "encoding",
            f"'compressed_segmentation' takes one channel of uint32 or uint64 labels, not "
            f"{channels} of {dtype}",
            "Use encoding='raw', or write one channel of uint32 or uint64 labels",
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

    labels = np.asfortranarray(chunk)
    out: bytes = compressed_segmentation.compress(labels, block_size=CSEG_BLOCK, order="F")
    return out


def decode_chunk(
    data: bytes, encoding: str, shape: tuple[int, ...], dtype: np.dtype[Any]
) -> np.ndarray:
    """The ``(x, y, z, channel)`` array of a chunk's bytes (raises on bytes that do not decode)."""
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
    import compressed_segmentation

    labels: np.ndarray = compressed_segmentation.decompress(
        data, shape, dtype, block_size=CSEG_BLOCK, order="F"
    )
    return labels
