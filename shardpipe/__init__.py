"""shardpipe: write and rechunk Dask arrays into sharded Zarr v3 arrays, lock-free."""

from importlib.metadata import PackageNotFoundError, version

from shardpipe.dataset import open_dataset
from shardpipe.dataset import register as _register_accessors
from shardpipe.engine.reports import WriteReport
from shardpipe.errors import (
    ArrayExistsError,
    InvalidArgumentError,
    JobConflictError,
    MemoryBudgetError,
    ShardConflictError,
    ShardpipeError,
    SourceOverlapsTargetError,
    StoreNotWritableError,
    UnsupportedLegacyError,
    VerificationError,
)
from shardpipe.legacy.migration import MigrateReport, migrate
from shardpipe.maintenance.upkeep import (
    ArrayInfo,
    CompactReport,
    RepairReport,
    compact,
    info,
    repair,
)
from shardpipe.maintenance.verification import VerifyReport, verify
from shardpipe.ome.api import to_ome_zarr
from shardpipe.ome.job import OmeZarrWrite
from shardpipe.ome.prepare import prepare_ome_zarr
from shardpipe.ome.report import OmeZarrReport
from shardpipe.precomputed.api import to_neuroglancer_precomputed
from shardpipe.rechunking.api import RechunkJob, plan_rechunk, rechunk
from shardpipe.rechunking.group import plan_group_rechunk, rechunk_group
from shardpipe.write.api import cleanup, to_sharded_zarr
from shardpipe.write.job import ShardedWrite
from shardpipe.write.prepare import prepare_write

__all__ = [
    "ArrayExistsError",
    "ArrayInfo",
    "CompactReport",
    "InvalidArgumentError",
    "JobConflictError",
    "MemoryBudgetError",
    "MigrateReport",
    "OmeZarrReport",
    "OmeZarrWrite",
    "RechunkJob",
    "RepairReport",
    "ShardConflictError",
    "ShardedWrite",
    "ShardpipeError",
    "SourceOverlapsTargetError",
    "StoreNotWritableError",
    "UnsupportedLegacyError",
    "VerificationError",
    "VerifyReport",
    "WriteReport",
    "cleanup",
    "compact",
    "info",
    "migrate",
    "open_dataset",
    "plan_group_rechunk",
    "plan_rechunk",
    "prepare_ome_zarr",
    "prepare_write",
    "rechunk",
    "rechunk_group",
    "repair",
    "to_neuroglancer_precomputed",
    "to_ome_zarr",
    "to_sharded_zarr",
    "verify",
]

_register_accessors()

try:
    __version__ = version("shardpipe")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.1.0"
