"""What a rechunk reads: ``Source`` and ``open_source``.

A Zarr array (v2 or v3, sharded or not; by path, URL or object) or a Dask
array, with the settings that carry over to the target: fill value,
dimension names and attributes (not the codecs). A Zarr array is read
through shardpipe's bounded decoding
(:func:`~shardpipe.stored.bounded_reads.bounded_array`): a stored chunk
larger than its codecs can make, or one that would inflate past its raw
size, is a :class:`~shardpipe.errors.ChunkDecodeError` naming it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import dask.array as da
import numpy as np
import zarr

from shardpipe import advice
from shardpipe.core.grid import Shape
from shardpipe.errors import InvalidArgumentError, StorageAccessError
from shardpipe.rechunking.intermediate import placeholder
from shardpipe.storage.local.contained import contained
from shardpipe.storage.loopless_finalizers import close_on_their_loops
from shardpipe.storage.option_names import S3_SCHEMES
from shardpipe.storage.urls import check_location
from shardpipe.stored.bounded_reads import bounded_array
from shardpipe.stored.locations import store_name
from shardpipe.stored.region_reads import region_reader

V2_DIMENSIONS = "_ARRAY_DIMENSIONS"
"""The attribute in which xarray's Zarr v2 convention keeps dimension names."""


@dataclass(frozen=True)
class Source:
    """What is read: the data as a Dask array (not yet blocked) and what carries over.

    Attributes
    ----------
    name : str
        How the source is shown (its path or URL, or "a Dask array").
    array : zarr.Array or dask.array.Array
        The source (a Zarr array as :func:`~shardpipe.stored.bounded_reads.bounded_array`
        reads it).
    read_unit : tuple of int
        The source's chunk shape (shard shape if sharded); a Dask array's
        block shape.
    fill_value, dimension_names, attributes
        Carried over to the target unless given.
    planned : bool
        Stands for an intermediate copy not written yet (planning only).
    read_blocks : callable, optional
        How the source is read in blocks of a shape, when not by
        zarr-python's ``da.from_zarr``: an unsharded Zarr array by
        :class:`~shardpipe.stored.region_reads.RegionReader`, an uncompressed
        intermediate copy by :meth:`~shardpipe.rechunking.intermediate.Intermediate.source`.
    """

    name: str
    array: Any
    read_unit: Shape
    fill_value: Any = None
    dimension_names: tuple[str, ...] | None = None
    attributes: dict[str, Any] | None = None
    planned: bool = False
    read_blocks: Callable[[Shape], da.Array] | None = None

    @property
    def shape(self) -> Shape:
        """The source's shape."""
        return tuple(self.array.shape)

    @property
    def dtype(self) -> np.dtype[Any]:
        """The source's dtype."""
        dtype: np.dtype[Any] = np.dtype(self.array.dtype)
        return dtype

    def blocks(self, block_shape: Shape) -> da.Array:
        """The source as a Dask array of ``block_shape`` blocks (a Dask source as it is)."""
        if self.planned:
            return placeholder(self.shape, self.dtype, block_shape)
        if self.read_blocks is not None:
            return self.read_blocks(block_shape)
        if isinstance(self.array, da.Array):
            return self.array
        blocked: da.Array = da.from_zarr(self.array, chunks=block_shape)
        return blocked


def open_source(source: Any, storage_options: dict[str, Any] | None = None) -> Source:
    """Open what ``rechunk`` reads, with the settings that carry over.

    Raises
    ------
    InvalidArgumentError
        If ``source`` is neither a Zarr array (or its path or URL) nor a
        Dask array, or cannot be opened.
    """
    if isinstance(source, da.Array):
        return Source("a Dask array", source, tuple(int(c[0]) for c in source.chunks))
    if isinstance(source, str | os.PathLike):
        name = check_location("source", source)
        close_on_their_loops(name)  # gcsfs's and adlfs's finalizers at exit
        try:
            store = contained(name)  # a local path: kept inside its folder
            options = storage_options if store is name else None
            array = zarr.open_array(store, mode="r", storage_options=options)
        except Exception as err:
            raise_if_access_refused(name, err)
            raise InvalidArgumentError(
                "source",
                f"cannot open a Zarr array at {name!r} ({type(err).__name__}: {err})",
                "Give the path or URL of a Zarr v2 or v3 array (not of a group), with "
                f"{advice.name('source_storage_options')} for remote stores",
            ) from err
    elif isinstance(source, zarr.Array):
        array = source
        name = f"{store_name(source.store).rstrip('/')}/{source.path}".rstrip("/")  # its URL
    else:
        raise InvalidArgumentError(
            "source",
            f"expected a Zarr array, its path or URL, or a Dask array, got {type(source).__name__}",
            "For a NumPy array or an xarray object, use to_sharded_zarr or ds.shard.to_zarr",
        )
    attributes = dict(array.attrs)
    names: Any = (
        array.metadata.dimension_names
        if array.metadata.zarr_format == 3
        else attributes.pop(V2_DIMENSIONS, None)
    )
    fill = array.metadata.fill_value
    bounded = bounded_array(array)
    reader = region_reader(bounded)
    return Source(
        name=name,
        array=bounded,
        read_unit=tuple(array.shards or array.chunks),
        fill_value=fill.item() if isinstance(fill, np.generic) else fill,
        dimension_names=None if names is None else tuple(str(n) for n in names),
        attributes=attributes,
        read_blocks=None if reader is None else reader.blocks,
    )


def raise_if_access_refused(name: str, err: Exception) -> None:
    """Raise a ``StorageAccessError`` if S3 refused to open ``name`` (credentials,
    permissions, no such bucket): the storage's fault, not the argument's."""
    if not name.startswith(S3_SCHEMES):
        return
    from shardpipe.storage.s3 import faults

    kind, cause, _ = faults.classify(
        err, endpoint="the endpoint", bucket=name.split("/")[2], reached=False, attempts=""
    )
    if kind is StorageAccessError:
        options = advice.name("source_storage_options")
        raise StorageAccessError(
            f"source: cannot open {name!r}: {cause}; give the source's credentials and "
            f"endpoint in {options} (key, secret, endpoint_url), or set AWS_ACCESS_KEY_ID "
            "and AWS_SECRET_ACCESS_KEY"
        ) from err
