"""``compact``: rewrite shards whose unused bytes pass a threshold.

Appends and in-place updates leave bytes no index points at. :func:`compact`
rewrites each shard whose unused share is above ``threshold``, copying the
kept inner chunks as they are (never decoded); each shard is replaced
atomically and only if it did not change since its index was read, while
the job holds the array's marker.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shardpipe import advice
from shardpipe.core.checks import check_bool, check_int
from shardpipe.core.display import ShowsSummary, Summary, format_count, format_nbytes
from shardpipe.core.shard_update import Abilities, plan_shard_update
from shardpipe.engine.shard_sweep import over_stored_shards
from shardpipe.engine.update_tasks import StoredShard, rewrite_shard
from shardpipe.errors import InvalidArgumentError
from shardpipe.journal.array_lock import holding
from shardpipe.journal.markers import JobKeys
from shardpipe.storage.resolve import resolve_store
from shardpipe.stored.metadata import format_of, read_metadata
from shardpipe.stored.places import check_node_present, check_not_a_file
from shardpipe.write.options import STORED_PARAMETERS
from shardpipe.write.parameters import shares_parameters


@dataclass(repr=False)
class CompactReport(ShowsSummary):
    """What :func:`compact` did.

    Attributes
    ----------
    shards_checked : int
        Shards present.
    shards_rewritten : int
        Shards rewritten compactly.
    nbytes_before, nbytes_after : int
        Bytes of the rewritten shards before and after.
    """

    shards_checked: int = 0
    shards_rewritten: int = 0
    nbytes_before: int = 0
    nbytes_after: int = 0

    @property
    def nbytes_reclaimed(self) -> int:
        """Bytes the rewritten shards gave back."""
        return self.nbytes_before - self.nbytes_after

    def _summary(self) -> Summary:
        return Summary(
            "CompactReport",
            None,
            [
                ("shards checked", format_count(self.shards_checked)),
                ("shards rewritten", format_count(self.shards_rewritten)),
                ("bytes before", format_nbytes(self.nbytes_before)),
                ("bytes after", format_nbytes(self.nbytes_after)),
                ("reclaimed", format_nbytes(self.nbytes_reclaimed)),
            ],
        )

    def __str__(self) -> str:
        return (
            f"{self.shards_rewritten:,} of {self.shards_checked:,} shard(s) rewritten: "
            f"{format_nbytes(self.nbytes_before)} -> {format_nbytes(self.nbytes_after)}, "
            f"{format_nbytes(self.nbytes_reclaimed)} reclaimed"
        )


@shares_parameters(STORED_PARAMETERS)
def compact(
    store: Any,
    path: str | None = None,
    *,
    threshold: float = 0.1,
    storage_options: dict[str, Any] | None = None,
    workers: int = 4,
    progress: bool = False,
) -> CompactReport:
    """Rewrite every shard whose unused share of bytes is above ``threshold``.

    Kept inner chunks are copied as they are (never decoded). Each shard is
    replaced atomically and only if it did not change since its index was
    read; every worker holds one whole shard.

    Parameters
    ----------
    threshold : float
        In ``[0, 1)``: shards with a larger unused share are rewritten
        (``0`` rewrites every shard with any unused byte).
    workers : int
        Shards rewritten concurrently (each held whole in memory).
    """
    fix = f"Use a share of a shard's bytes, e.g. {advice.setting('threshold', 0.1)}"
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)):
        raise InvalidArgumentError("threshold", f"{threshold!r} is not a number", fix)
    if not 0 <= threshold < 1:
        raise InvalidArgumentError("threshold", f"{threshold!r} is not in [0, 1)", fix)
    workers = check_int("workers", workers, example=4)
    progress = check_bool("progress", progress)
    target = resolve_store(store, path, storage_options)
    check_not_a_file(target, "path" if path else "store")
    check_node_present(target, "path" if path else "store")
    metadata, _ = read_metadata(target, "store", writing=False)
    shard_format = format_of(metadata)
    report = CompactReport()

    def one(stored: StoredShard) -> tuple[int, int]:
        size, unused = stored.layout.size, stored.layout.unused_nbytes()
        if not unused or unused <= threshold * size:
            return size, -1
        plan = plan_shard_update(stored.layout, {}, "rewrite", Abilities())
        return size, rewrite_shard(shard_format, stored, plan, {})

    with holding(target.shards, JobKeys(target.key("")), "compact"):
        shards = over_stored_shards(
            target, metadata, workers, one, progress=progress, name="compact"
        )
        for before, after in shards:
            report.shards_checked += 1
            if after >= 0:
                report.shards_rewritten += 1
                report.nbytes_before += before
                report.nbytes_after += after
    return report
