"""shardpipe: write and rechunk Dask arrays into sharded Zarr v3 arrays, lock-free."""

from importlib.metadata import PackageNotFoundError, version

from shardpipe.errors import (
    ArrayExistsError,
    InvalidArgumentError,
    MemoryBudgetError,
    ShardpipeError,
    SourceOverlapsTargetError,
    StoreNotWritableError,
    VerificationError,
)
from shardpipe.job import ShardedWrite, prepare_write
from shardpipe.tasks import WriteReport
from shardpipe.verify import VerifyReport, verify
from shardpipe.writer import cleanup, to_sharded_zarr

__all__ = [
    "ArrayExistsError",
    "InvalidArgumentError",
    "MemoryBudgetError",
    "ShardedWrite",
    "ShardpipeError",
    "SourceOverlapsTargetError",
    "StoreNotWritableError",
    "VerificationError",
    "VerifyReport",
    "WriteReport",
    "cleanup",
    "prepare_write",
    "to_sharded_zarr",
    "verify",
]

try:
    __version__ = version("shardpipe")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.1.0"
