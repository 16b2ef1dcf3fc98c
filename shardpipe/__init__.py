"""shardpipe: write and rechunk Dask arrays into sharded Zarr v3 arrays, lock-free."""

from shardpipe.errors import (
    ArrayExistsError,
    InvalidArgumentError,
    ShardpipeError,
    StoreNotWritableError,
    VerificationError,
)
from shardpipe.verify import VerifyReport, verify
from shardpipe.writer import cleanup, to_sharded_zarr

__all__ = [
    "ArrayExistsError",
    "InvalidArgumentError",
    "ShardpipeError",
    "StoreNotWritableError",
    "VerificationError",
    "VerifyReport",
    "cleanup",
    "to_sharded_zarr",
    "verify",
]
__version__ = "0.1.0"
