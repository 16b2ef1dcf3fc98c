"""xarray front-end: ``ds.shard.to_zarr(...)`` and :func:`open_dataset`."""

from shardpipe.dataset.accessor import ShardAccessor, register
from shardpipe.dataset.open import open_dataset, shard_chunks
from shardpipe.dataset.write import to_zarr

__all__ = ["ShardAccessor", "open_dataset", "register", "shard_chunks", "to_zarr"]
