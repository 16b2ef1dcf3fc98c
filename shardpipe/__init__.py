"""shardpipe: write and rechunk Dask arrays into sharded Zarr v3 arrays, lock-free."""

from shardpipe import _moved
from shardpipe._version import __version__ as __version__
from shardpipe.dataset import (
    DatasetRepairReport,
    DatasetWriteReport,
    open_dataset,
    repair_dataset,
)
from shardpipe.dataset import register as _register_accessors
from shardpipe.engine.reports import WriteReport
from shardpipe.errors import (
    AbilityNotSupportedError,
    ArrayExistsError,
    ChunkDecodeError,
    ConditionFailedError,
    InvalidArgumentError,
    JobConflictError,
    MemoryBudgetError,
    MetadataError,
    PartsNotSupportedError,
    PlanError,
    ShardConflictError,
    ShardFormatError,
    ShardpipeError,
    SourceOverlapsTargetError,
    StorageAccessError,
    StorageError,
    StorageFullError,
    StoreNotWritableError,
    TransactionConflictError,
    TransientStorageError,
    UnsafeKeyError,
    UnsupportedLegacyError,
    VerificationError,
    WriteFailedError,
)
from shardpipe.legacy.migration import MigrateReport, migrate
from shardpipe.maintenance.array_info import ArrayInfo, GroupInfo, info
from shardpipe.maintenance.compaction import CompactReport, compact
from shardpipe.maintenance.repairs import RepairReport, repair
from shardpipe.maintenance.verification import VerifyReport, verify
from shardpipe.ome.api import to_ome_zarr
from shardpipe.ome.convert import OmeZarrConversion, convert_ome_zarr, prepare_ome_conversion
from shardpipe.ome.job import OmeZarrWrite
from shardpipe.ome.prepare import prepare_ome_zarr
from shardpipe.ome.report import OmeZarrReport
from shardpipe.precomputed.api import to_neuroglancer_precomputed
from shardpipe.precomputed.check import PrecomputedReport, ScaleReport
from shardpipe.reading import open_array
from shardpipe.rechunking.api import plan_rechunk, rechunk
from shardpipe.rechunking.group import (
    GroupRechunkJob,
    GroupRechunkReport,
    plan_group_rechunk,
    rechunk_group,
)
from shardpipe.rechunking.job import RechunkJob
from shardpipe.write.api import cleanup, to_sharded_zarr
from shardpipe.write.batch import RegionBatch, write_regions
from shardpipe.write.job import ShardedWrite
from shardpipe.write.prepare import prepare_write

__all__ = [
    "AbilityNotSupportedError",
    "ArrayExistsError",
    "ArrayInfo",
    "ChunkDecodeError",
    "CompactReport",
    "ConditionFailedError",
    "DatasetRepairReport",
    "DatasetWriteReport",
    "GroupInfo",
    "GroupRechunkJob",
    "GroupRechunkReport",
    "InvalidArgumentError",
    "JobConflictError",
    "MemoryBudgetError",
    "MetadataError",
    "MigrateReport",
    "OmeZarrConversion",
    "OmeZarrReport",
    "OmeZarrWrite",
    "PartsNotSupportedError",
    "PlanError",
    "PrecomputedReport",
    "RechunkJob",
    "RegionBatch",
    "RepairReport",
    "ScaleReport",
    "ShardConflictError",
    "ShardFormatError",
    "ShardedWrite",
    "ShardpipeError",
    "SourceOverlapsTargetError",
    "StorageAccessError",
    "StorageError",
    "StorageFullError",
    "StoreNotWritableError",
    "TransactionConflictError",
    "TransientStorageError",
    "UnsafeKeyError",
    "UnsupportedLegacyError",
    "VerificationError",
    "VerifyReport",
    "WriteFailedError",
    "WriteReport",
    "cleanup",
    "compact",
    "convert_ome_zarr",
    "info",
    "migrate",
    "open_array",
    "open_dataset",
    "plan_group_rechunk",
    "plan_rechunk",
    "prepare_ome_conversion",
    "prepare_ome_zarr",
    "prepare_write",
    "rechunk",
    "rechunk_group",
    "repair",
    "repair_dataset",
    "to_neuroglancer_precomputed",
    "to_ome_zarr",
    "to_sharded_zarr",
    "verify",
    "write_regions",
]

_register_accessors()
_moved.install()
