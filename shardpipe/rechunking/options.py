"""The options of the rechunk front doors, defined once: types, defaults, documentation.

:func:`~shardpipe.plan_rechunk` and :func:`~shardpipe.rechunk` take
:class:`RechunkOptions`; :func:`~shardpipe.plan_group_rechunk` and
:func:`~shardpipe.rechunk_group` take :class:`GroupRechunkOptions`. Their
entries are the array options of :mod:`shardpipe.write.options`, with the
rechunk's own (where the source is read, where the intermediate copy goes)
and those that mean something else here (what carries over from the
source, what ``resume`` compares). A group rechunk's per-array settings
(``arrays=``) are checked here too (:func:`check_array_overrides`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, TypedDict

from shardpipe.core.checks import check_entry_keys, check_int_tuple, checking_entry, shown
from shardpipe.core.grid import Shape
from shardpipe.errors import InvalidArgumentError
from shardpipe.write.options import (
    ARRAY_PARAMETERS,
    SOURCE_PARAMETERS,
    LayoutOptions,
    TargetOptions,
)
from shardpipe.write.parameters import SharedParameters


class RechunkOptions(TargetOptions, LayoutOptions, total=False):
    """Every option of :func:`~shardpipe.plan_rechunk` and :func:`~shardpipe.rechunk`."""

    max_mem: int | str
    source_storage_options: dict[str, Any] | None
    temp_store: str | os.PathLike[str] | None


class GroupRechunkOptions(TypedDict, total=False):
    """The options of :func:`~shardpipe.plan_group_rechunk` and :func:`~shardpipe.rechunk_group`."""

    shards: Any
    chunks: Any
    arrays: Mapping[str, Mapping[str, Any]] | None
    max_mem: int | str
    compressors: Any
    chunk_checksums: bool
    index_location: str | None
    storage_options: dict[str, Any] | None
    source_storage_options: dict[str, Any] | None
    overwrite: bool
    resume: bool


RECHUNK_PARAMETERS = (
    ARRAY_PARAMETERS
    | SOURCE_PARAMETERS
    | SharedParameters(
        """
    source : str, os.PathLike, zarr.Array or dask.array.Array
        A Zarr v2 or v3 array (sharded or not), its local path or fsspec
        URL, or any Dask array (read as it is blocked).
    target : str, os.PathLike, zarr Store, zarr Group or icechunk.Session
        Where to write, as the ``store`` of :func:`~shardpipe.to_sharded_zarr`.
    fill_value : scalar, optional
        Value of elements never written; the source's by default.
    dimension_names : sequence of str, optional
        Names of the dimensions, stored in the metadata; the source's by
        default (Zarr v3 ``dimension_names``, or the ``_ARRAY_DIMENSIONS``
        attribute of xarray's Zarr v2 convention).
    attributes : dict, optional
        User attributes stored in the metadata (JSON-serialisable); the
        source's by default.
    resume : bool or "force"
        Carry on an interrupted run of the same rechunk: shards of the target
        that are complete (present, index verifying) are kept, the rest
        written. The target must have been written by a rechunk of the same
        source (location, shape, dtype, read unit) into the same layout,
        codecs and attributes, as the job record saved beside ``zarr.json``
        (just before it, so before the first shard) shows; else an error
        (``"force"`` skips the source comparison). Without a target, a fresh
        start. See :mod:`shardpipe.write.resume`. A two-pass rechunk also
        carries on its intermediate copy, found by its record in the target's
        job folder (:mod:`shardpipe.rechunking.copy_record`): a complete copy
        is used as it is, a partial one keeps its complete blocks.
    temp_store : str or os.PathLike, optional
        Where a two-pass rechunk may keep an intermediate copy (a path or
        URL that does not exist yet; deleted afterwards, kept by a killed run
        for ``resume``). Used only when the
        blocks that fit ``max_mem`` are thinner than the inner chunks
        (:mod:`shardpipe.rechunking.intermediate` says why); the plan says which.
    """,
        {"temp_store": None},
    )
)
"""The entries and defaults of the parameters of :func:`~shardpipe.rechunk` and its plan."""

GROUP_PARAMETERS = RECHUNK_PARAMETERS | SharedParameters(
    """
    source : str, os.PathLike or zarr.Group
        A Zarr v2 or v3 group (path, fsspec URL or object).
    target : str, os.PathLike, zarr Store or icechunk.Session
        Where to write the Zarr v3 hierarchy; into a writable Icechunk session,
        the hierarchy is one transaction (see :meth:`~shardpipe.GroupRechunkJob.execute`).
    shards : tuple of int, optional
        Shard shape of every array with as many dimensions (the others get
        the defaults).
    chunks : tuple of int, optional
        Inner-chunk shape of every array with as many dimensions.
    arrays : dict, optional
        Per array path (relative to the group), ``{"shards": ..., "chunks": ...}``.
    resume : bool
        Carry on an interrupted rechunk of the group: every array as
        :func:`~shardpipe.rechunk` does with ``resume=True``.
    """,
    {"arrays": None},
)
"""The entries and defaults of the parameters of :func:`~shardpipe.rechunk_group` and its plan."""


ARRAY_OVERRIDE_KEYS = ("shards", "chunks")
"""What ``arrays=`` of a group rechunk may set per array."""


def check_array_overrides(arrays: Any) -> dict[str, dict[str, Shape]]:
    """Check ``arrays={"path": {"shards": (...), "chunks": (...)}}`` of a group rechunk.

    A shape of None or ``"auto"`` is the default (the group's, else shardpipe's).
    """
    if arrays is None:
        return {}
    if not isinstance(arrays, Mapping):
        raise InvalidArgumentError(
            "arrays",
            f"expected a dict of array path to shapes, got {shown(arrays)}",
            'Pass e.g. arrays={"t2m": {"shards": (365, 720, 1440), "chunks": (30, 90, 90)}}',
        )
    checked: dict[str, dict[str, Shape]] = {}
    for path, shapes in arrays.items():
        if not isinstance(path, str) or not isinstance(shapes, Mapping):
            raise InvalidArgumentError(
                "arrays",
                f"entry {path!r}: {shapes!r} is not a dict of shapes under a string path",
                'Pass e.g. arrays={"t2m": {"shards": (365, 720, 1440)}}',
            )
        entry = f"entry {path!r}"
        check_entry_keys("arrays", entry, shapes, ARRAY_OVERRIDE_KEYS, "per-array settings")
        checked[path] = {}
        for key, shape in shapes.items():
            if isinstance(shape, str) and shape == "auto":  # zarr's spelling of the default
                continue
            with checking_entry("arrays", entry):
                checked[path][key] = check_int_tuple(key, shape) or ()
            if shape is None:
                del checked[path][key]
    return checked
