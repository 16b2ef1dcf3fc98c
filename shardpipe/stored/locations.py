"""Where arrays live, to tell when a write would overwrite what it reads.

A :class:`Location` names a node of a store independently of how it was
opened: a local directory, an object-store prefix, or an in-memory store. A
write whose target is, contains, or lies inside a zarr array that its Dask
graph reads would destroy its own source (with ``overwrite=True`` the old
array is deleted before its blocks are read), so it is refused.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import dask.array as da
import zarr
from zarr.abc.store import Store
from zarr.storage import FsspecStore, LocalStore, MemoryStore, WrapperStore

if TYPE_CHECKING:
    from shardpipe.storage.resolve import ResolvedStore

_MAX_SCANNED_LAYER = 64
"""Layers with more keys than this are task layers, not holders of source arrays."""


@dataclass(frozen=True)
class Location:
    """A place in some storage.

    Parameters
    ----------
    scheme : str
        ``"file"``, an fsspec protocol such as ``"s3"``, or ``"memory"``.
    root : str
        The store's identity within the scheme (``""`` for file systems and
        object stores, whose paths are global; the store's id for memory).
    path : str
        ``/``-separated path, without leading or trailing ``/``.
    """

    scheme: str
    root: str
    path: str

    def overlaps(self, other: Location) -> bool:
        """Whether one location is the other or lies inside it."""
        if (self.scheme, self.root) != (other.scheme, other.root):
            return False
        a, b = self.path, other.path
        return a == b or not a or not b or a.startswith(b + "/") or b.startswith(a + "/")

    def __str__(self) -> str:
        separator = "/" if self.scheme == "file" else ""
        return f"{self.scheme}://{separator}{self.path}"


def _join(*parts: str) -> str:
    return "/".join(p.strip("/") for p in parts if p.strip("/"))


def store_location(store: Store, path: str = "") -> Location | None:
    """Return where ``path`` inside ``store`` lives, or None for an unknown kind of store.

    A store wrapping another (a zarr ``WrapperStore``: a ``LoggingStore``,
    the bounded store a conversion reads its source through) is where the
    store it wraps is.
    """
    while isinstance(store, WrapperStore):
        store = store._store
    if isinstance(store, LocalStore):
        return Location("file", "", _join(os.path.realpath(str(store.root)), path))
    if isinstance(store, FsspecStore):
        protocol = store.fs.protocol
        scheme = protocol if isinstance(protocol, str) else protocol[0]
        if scheme in ("file", "local"):
            return Location("file", "", _join(os.path.realpath(store.path), path))
        return Location(scheme, "", _join(store.path, path))
    if isinstance(store, MemoryStore):
        return Location("memory", str(id(store._store_dict)), _join(path))
    return None


def store_name(store: Any) -> str:
    """``store`` as a message names it: its URL (``s3://bucket/a.zarr``,
    ``file:///data/a.zarr``) where :func:`store_location` knows it, else as it prints."""
    where = None if isinstance(store, str) else store_location(store)
    return str(store) if where is None or where.scheme == "memory" else str(where)


def resolved_name(resolved: ResolvedStore) -> str:
    """The store of ``resolved`` as a message names it (:func:`store_name`), with the
    scheme the user wrote (``az://`` where adlfs says ``abfs://``)."""
    name = store_name(resolved.zarr_store)
    _, found, rest = name.partition("://")
    return f"{resolved.scheme}://{rest}" if found and resolved.scheme else name


_WRAPPED = ("array", "_array")
"""Attributes under which array wrappers hold what they wrap (xarray's lazy indexing
adapters and backend arrays: ``LazilyIndexedArray(array=ZarrArrayWrapper)``, whose
``_array`` is the zarr array)."""

_MAX_WRAPPERS = 8
"""How many wrappers deep a zarr array is looked for."""


def _zarr_arrays_in(value: Any, depth: int = 0) -> Iterator[zarr.Array[Any]]:
    if isinstance(value, zarr.Array):
        yield value
    elif isinstance(value, tuple | list):
        for item in value:
            yield from _zarr_arrays_in(item, depth)
    elif depth < _MAX_WRAPPERS:
        for name in _WRAPPED:
            inner = _stored_attribute(value, name)
            if inner is not None and inner is not value:
                yield from _zarr_arrays_in(inner, depth + 1)


def _stored_attribute(value: Any, name: str) -> Any:
    """``value``'s own attribute ``name`` (in its ``__dict__`` or a slot), or None.

    Only stored attributes are read: a property could compute, or read data.
    """
    own = getattr(value, "__dict__", None)
    if isinstance(own, dict) and name in own:
        return own[name]
    for klass in type(value).__mro__:
        slots = getattr(klass, "__slots__", ())
        if name == slots or (not isinstance(slots, str) and name in slots):
            return getattr(value, name, None)
    return None


def source_locations(arr: da.Array) -> list[Location]:
    """Return the locations of the zarr arrays that ``arr``'s graph reads.

    Finds arrays wrapped by ``da.from_zarr`` and ``da.from_array`` (held in a
    small layer of their own, or inlined in a blockwise layer's arguments);
    it does not look inside arbitrary task arguments.
    """
    found: list[Location] = []
    graph = arr.__dask_graph__()
    for layer in getattr(graph, "layers", {"": graph}).values():
        values: list[Any] = []
        indices = getattr(layer, "indices", None)
        if indices is not None:  # blockwise: literal arguments sit in the indices
            values.extend(value for value, index in indices if index is None)
        elif len(layer) <= _MAX_SCANNED_LAYER:
            values.extend(layer.values())
        for value in values:
            for source in _zarr_arrays_in(value):
                location = store_location(source.store, source.path)
                if location is not None and location not in found:
                    found.append(location)
    return found


def locations_read(value: Any) -> list[Location]:
    """Where the zarr arrays that ``value`` reads live: a Dask array, or a lazy array wrapper.

    For a Dask array, :func:`source_locations`; for anything else (xarray's
    lazily indexed backend arrays), the zarr arrays it wraps.
    """
    if isinstance(value, da.Array):
        return source_locations(value)
    found: list[Location] = []
    for array in _zarr_arrays_in(value):
        location = store_location(array.store, array.path)
        if location is not None and location not in found:
            found.append(location)
    return found
