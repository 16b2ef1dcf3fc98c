"""Bring a dataset back to its last complete state after an interrupted write.

The accessor rewrites the consolidated metadata last, so it always describes
the dataset as the last write that finished left it: a killed append leaves
some arrays grown (the coordinates along ``append_dim``, the variables whose
shards were all written) and others not, while readers that use the
consolidated metadata still see the old dataset. :func:`repair_dataset`
makes the arrays agree with it again: every sharded array is repaired
(:func:`shardpipe.repair`: undo records rolled back, leftovers removed), and
every array whose ``zarr.json`` shape differs from its consolidated shape is
resized back (data beyond it deleted, as zarr's ``resize`` does).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import zarr

from shardpipe.core.checks import check_bool, check_path
from shardpipe.core.display import ShowsSummary, Summary, format_count
from shardpipe.dataset.existing import consolidated_metadata
from shardpipe.dataset.options import DATASET_PARAMETERS
from shardpipe.errors import InvalidArgumentError
from shardpipe.internals.zarr_core import ArrayV3Metadata
from shardpipe.maintenance.repairs import RepairReport, repair
from shardpipe.storage.resolve import ResolvedStore, resolve_store
from shardpipe.stored.locations import resolved_name
from shardpipe.stored.metadata import is_sharded
from shardpipe.stored.places import check_node_present
from shardpipe.write.options import STORED_PARAMETERS
from shardpipe.write.parameters import shares_parameters


@dataclass(repr=False)
class DatasetRepairReport(ShowsSummary):
    """What :func:`repair_dataset` did.

    Attributes
    ----------
    arrays : dict
        Per sharded array (by path), the :class:`~shardpipe.RepairReport` of its repair.
    resized : dict
        Per array cut back, ``(shape found, consolidated shape)``.
    unknown : list
        Arrays that the consolidated metadata does not list (left as they are:
        an interrupted write may have created them).
    """

    arrays: dict[str, RepairReport] = field(default_factory=dict)
    resized: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = field(default_factory=dict)
    unknown: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether every sharded array verifies clean afterwards."""
        return all(report.ok for report in self.arrays.values())

    def _summary(self) -> Summary:
        rows = [
            ("arrays repaired", format_count(len(self.arrays))),
            (
                "rolled back",
                f"{format_count(sum(r.rolled_back for r in self.arrays.values()))} shard(s)",
            ),
            ("resized", format_count(len(self.resized))),
            ("not consolidated", f"{format_count(len(self.unknown))} array(s), left as is"),
        ]
        problems = [
            f"{path}: {key}: {problem}"
            for path, report in self.arrays.items()
            for key, problem in report.verify.problems[:20]
        ]
        total = sum(len(r.verify.problems) for r in self.arrays.values())
        status = "OK" if self.ok else "PROBLEMS LEFT"
        return Summary(
            "DatasetRepairReport", status, rows, problems, total, "arrays[path].verify.problems"
        )

    def __str__(self) -> str:
        lines = [
            f"{len(self.arrays)} sharded array(s) repaired, "
            f"{sum(r.rolled_back for r in self.arrays.values())} shard(s) rolled back, "
            f"{sum(len(r.verify.problems) for r in self.arrays.values())} problem(s) left"
        ]
        lines += [
            f"resized {path} from {found} back to {shape}"
            for path, (found, shape) in self.resized.items()
        ]
        lines += [f"not in the consolidated metadata, left as is: {p}" for p in self.unknown]
        return "\n".join(lines)


@shares_parameters(DATASET_PARAMETERS | STORED_PARAMETERS)
def repair_dataset(
    store: Any,
    *,
    group: str | None = None,
    storage_options: dict[str, Any] | None = None,
    force: bool = False,
    progress: bool = False,
) -> DatasetRepairReport:
    """Repair every array of a dataset and cut them back to its consolidated shapes.

    Parameters
    ----------
    force : bool
        Passed to :func:`shardpipe.repair` for each sharded array.

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        If the store has no consolidated metadata (written with
        ``consolidated=False``): nothing then records the last complete state.
    shardpipe.errors.JobConflictError
        If a job that may still run holds one of the arrays.
    """
    check_path("group", group)
    force = check_bool("force", force)
    progress = check_bool("progress", progress)
    root = resolve_store(store, group, storage_options)
    check_node_present(root, "group" if group else "store")
    known = _consolidated_arrays(root)
    report = DatasetRepairReport()
    node = zarr.open_group(root.zarr_store, path=root.path, mode="r", use_consolidated=False)
    for _, array in sorted(node.arrays(), key=lambda item: item[0]):
        path = str(array.path)
        if is_sharded(array.metadata):
            report.arrays[path] = repair(
                ResolvedStore(root.zarr_store, root.shards, path), force=force, progress=progress
            )
        shape = known.get(path)
        if shape is None:
            report.unknown.append(path)
        elif tuple(array.shape) != shape:
            writable = zarr.open_array(root.zarr_store, path=path, mode="r+")
            report.resized[path] = (tuple(array.shape), shape)
            writable.resize(shape)
    return report


def _consolidated_arrays(root: ResolvedStore) -> dict[str, tuple[int, ...]]:
    """Shape per array path, from the consolidated metadata at the store's root."""
    consolidated = consolidated_metadata(root)
    if consolidated is None:
        raise InvalidArgumentError(
            "store",
            f"{resolved_name(root)} has no consolidated metadata, which records the "
            "dataset's last complete state",
            "Repair each sharded array with shardpipe.repair instead",
        )
    return {
        path: tuple(meta.shape)
        for path, meta in consolidated.flattened_metadata.items()
        if isinstance(meta, ArrayV3Metadata)
    }
