"""xarray front-end: ``ds.shard.to_zarr(...)`` and :func:`~shardpipe.dataset.open.open_dataset`."""

from shardpipe.dataset.accessor import ShardAccessor, register
from shardpipe.dataset.open import open_dataset, shard_chunks
from shardpipe.dataset.repair import DatasetRepairReport, repair_dataset
from shardpipe.dataset.write import to_zarr
from shardpipe.dataset.write_report import DatasetWriteReport

__all__ = [
    "DatasetRepairReport",
    "DatasetWriteReport",
    "ShardAccessor",
    "open_dataset",
    "register",
    "repair_dataset",
    "shard_chunks",
    "to_zarr",
]
