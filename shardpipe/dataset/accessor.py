"""The ``.shard`` accessor on xarray Datasets and DataArrays, registered on ``import shardpipe``."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, Unpack

import xarray as xr
from dask.delayed import Delayed

from shardpipe.dataset.options import DATASET_PARAMETERS, DatasetOptions
from shardpipe.engine.reports import WriteReport
from shardpipe.write.parameters import shares_parameters


class ShardAccessor:
    """``obj.shard``: write a Dataset or DataArray as sharded Zarr v3 (see :meth:`to_zarr`)."""

    def __init__(self, obj: xr.Dataset | xr.DataArray) -> None:
        self._obj = obj

    @shares_parameters(DATASET_PARAMETERS)
    def to_zarr(
        self,
        store: Any,
        *,
        compute: bool = True,
        progress: bool = False,
        commit: str | None = None,
        rebase: bool = False,
        **options: Unpack[DatasetOptions],
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
            compute=compute,
            progress=progress,
            commit=commit,
            rebase=rebase,
            **options,
        )


def register() -> None:
    """Register ``.shard`` on ``xr.Dataset`` and ``xr.DataArray`` (once)."""
    if not hasattr(xr.Dataset, "shard"):
        xr.register_dataset_accessor("shard")(ShardAccessor)  # type: ignore[no-untyped-call]
    if not hasattr(xr.DataArray, "shard"):
        xr.register_dataarray_accessor("shard")(ShardAccessor)  # type: ignore[no-untyped-call]
