"""The options of ``ds.shard.to_zarr``, defined once: types, defaults, documentation.

:meth:`ShardAccessor.to_zarr <shardpipe.dataset.accessor.ShardAccessor.to_zarr>`
and :func:`shardpipe.dataset.write.to_zarr` take :class:`DatasetOptions`.
Some are the array options of :mod:`shardpipe.write.options` as they are
(``max_mem``, ``storage_options``, ``write_strategy`` ...); the others name
dimensions and variables instead of axes (``shards``, ``chunks``,
``region``, ``append_dim``) or are xarray's (``encoding``, ``mode``,
``group``, ``consolidated``).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any, TypedDict

from shardpipe.write.options import ARRAY_PARAMETERS
from shardpipe.write.parameters import SharedParameters


class DatasetOptions(TypedDict, total=False):
    """Every option of ``ds.shard.to_zarr`` (but those about running it)."""

    shards: Mapping[Hashable, int] | None
    chunks: Mapping[Hashable, int] | None
    encoding: Mapping[Hashable, Mapping[str, Any]] | None
    mode: str | None
    append_dim: Hashable | None
    region: Mapping[Hashable, Any] | str | None
    group: str | None
    consolidated: bool
    write_strategy: str
    chunk_checksums: bool
    max_mem: int | str
    storage_options: dict[str, Any] | None


DATASET_PARAMETERS = ARRAY_PARAMETERS | SharedParameters(
    """
    store : str, os.PathLike, zarr Store or icechunk.Session
        A local path, an fsspec URL (``"s3://bucket/ds.zarr"``), a zarr
        store, or a writable Icechunk ``Session`` (see ``commit``;
        ``consolidated`` is then off, and variables left unsharded are
        written by xarray on local threads, through the session).
    shards : dict, optional
        Shard size per dimension name for every sharded variable, e.g.
        ``{"time": 365}``; ``-1`` is the whole dimension. A dimension left
        out spans the whole dimension. Variables none of whose dimensions
        is named get shardpipe's default (about 256 MiB per shard).
    chunks : dict, optional
        Inner-chunk size per dimension name; a dimension left out spans
        the shard. Default: about 1 MiB per inner chunk.
    encoding : dict, optional
        Per variable, as in ``Dataset.to_zarr``: CF keys (``dtype``,
        ``scale_factor``, ``add_offset``, ``_FillValue``, ``units``,
        ``calendar``), zarr keys (``compressors``, ``filters``,
        ``serializer``) and ``shards``/``chunks`` tuples that override
        the per-dimension sizes; ``"shards": None`` leaves a variable
        unsharded.
    mode : {"w-", "w", "a", "r+"}, optional
        As in ``Dataset.to_zarr``: create (fail if anything exists),
        overwrite, append or add variables, or write a region of existing
        variables. Default ``"w-"``, ``"a"`` with ``append_dim``, ``"r+"``
        with ``region``.
    append_dim : str, optional
        Dimension to grow: existing sharded variables are appended to by
        shardpipe's update machinery, one writer per shard.
    region : dict or "auto", optional
        Dimension name to slice (or ``"auto"``, found from the coordinate
        values, as in ``Dataset.to_zarr``) of existing variables to write.
    group : str, optional
        Group path inside the store.
    consolidated : bool
        Write consolidated metadata at the end.
    chunk_checksums : bool
        End the inner codec chain of every new sharded variable with
        zarr's ``crc32c`` codec (see :func:`shardpipe.to_sharded_zarr`). A
        variable's own ``compressors`` encoding is kept when it already
        checks its chunks. Existing variables keep their chain; coordinates
        and other arrays xarray writes unsharded get zarr's default.
    compute : bool
        Write now; with False, xarray writes the metadata and the
        coordinates now and a ``dask.delayed.Delayed`` writes the data
        variables (new variables only: updates run at once).
    commit : str, optional
        Into an Icechunk session: commit it with this message at the end;
        every report's ``snapshot_id`` is the new snapshot.
    """,
    {
        "shards": None,
        "chunks": None,
        "encoding": None,
        "mode": None,
        "append_dim": None,
        "region": None,
        "group": None,
        "consolidated": True,
    },
)
"""The entries and defaults of the parameters of ``ds.shard.to_zarr``."""
