"""The ``.shard`` accessor on xarray Datasets and DataArrays, registered on ``import shardpipe``."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

import xarray as xr
from dask.delayed import Delayed

from shardpipe.core.memory import DEFAULT_MAX_MEM
from shardpipe.engine.reports import WriteReport


class ShardAccessor:
    """``obj.shard``: write a Dataset or DataArray as sharded Zarr v3 (see :meth:`to_zarr`)."""

    def __init__(self, obj: xr.Dataset | xr.DataArray) -> None:
        self._obj = obj

    def to_zarr(
        self,
        store: Any,
        *,
        shards: Mapping[Hashable, int] | None = None,
        chunks: Mapping[Hashable, int] | None = None,
        encoding: Mapping[Hashable, Mapping[str, Any]] | None = None,
        mode: str | None = None,
        append_dim: Hashable | None = None,
        region: Mapping[Hashable, Any] | str | None = None,
        group: str | None = None,
        consolidated: bool = True,
        write_strategy: str = "auto",
        chunk_checksums: bool = True,
        max_mem: int | str = DEFAULT_MAX_MEM,
        storage_options: dict[str, Any] | None = None,
        compute: bool = True,
        progress: bool = False,
        commit: str | None = None,
        rebase: bool = False,
    ) -> dict[Hashable, WriteReport] | Delayed:
        """Write to a Zarr v3 group whose data variables are sharded, whatever the Dask chunks.

        What ``Dataset.to_zarr(zarr_format=3)`` writes (attributes,
        ``dimension_names``, coordinates, CF encoding, consolidated metadata),
        with the data variables sharded and written by shardpipe in one Dask
        computation: every shard has one writing task, so Dask chunks need
        not line up with shards and nothing is rechunked. ``xr.open_zarr``
        reads the result back; :func:`shardpipe.open_dataset` opens it with
        one Dask chunk per shard.

        Parameters
        ----------
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
            Write consolidated metadata at the end (default True).
        write_strategy : {"auto", "in_place", "append", "rewrite"}
            How updates change existing shards (see :func:`shardpipe.to_sharded_zarr`).
        chunk_checksums : bool
            End the inner codec chain of every new sharded variable with
            zarr's ``crc32c`` codec (default True; see
            :func:`shardpipe.to_sharded_zarr`). A variable's own
            ``compressors`` encoding is kept when it already checks its
            chunks. Existing variables keep their chain; coordinates and
            other arrays xarray writes unsharded get zarr's default.
        max_mem : int or str
            Memory budget per task (default ``"1GiB"``).
        storage_options : dict, optional
            fsspec options for URLs; ``{"fsync": False}`` for local paths.
        compute : bool
            Write now; with False, xarray writes the metadata and the
            coordinates now and a ``dask.delayed.Delayed`` writes the data
            variables (new variables only: updates run at once).
        progress : bool
            Show a progress bar over the shards of all variables.
        commit : str, optional
            Into an Icechunk session: commit it with this message at the end;
            every report's ``snapshot_id`` is the new snapshot.
        rebase : bool
            With ``commit``: rebase onto commits that reached the branch
            meanwhile when none changed a shard this write changed.

        Returns
        -------
        dict or dask.delayed.Delayed
            Per sharded variable, its :class:`~shardpipe.WriteReport`.

        Raises
        ------
        shardpipe.errors.InvalidArgumentError
            On bad arguments or data that does not fit the stored variables,
            naming the parameter and the variable, before anything is written.
        shardpipe.errors.ArrayExistsError
            With ``mode="w-"`` when something exists at the target.
        shardpipe.errors.JobConflictError
            When another shardpipe job is writing one of the arrays.
        shardpipe.errors.TransactionConflictError
            When the commit lost a race with another (nothing is committed).
        """
        from shardpipe.dataset.write import to_zarr

        return to_zarr(
            self._obj,
            store,
            shards=shards,
            chunks=chunks,
            encoding=encoding,
            mode=mode,
            append_dim=append_dim,
            region=region,
            group=group,
            consolidated=consolidated,
            write_strategy=write_strategy,
            chunk_checksums=chunk_checksums,
            max_mem=max_mem,
            storage_options=storage_options,
            compute=compute,
            progress=progress,
            commit=commit,
            rebase=rebase,
        )


def register() -> None:
    """Register ``.shard`` on ``xr.Dataset`` and ``xr.DataArray`` (once)."""
    if not hasattr(xr.Dataset, "shard"):
        xr.register_dataset_accessor("shard")(ShardAccessor)  # type: ignore[no-untyped-call]
    if not hasattr(xr.DataArray, "shard"):
        xr.register_dataarray_accessor("shard")(ShardAccessor)  # type: ignore[no-untyped-call]
