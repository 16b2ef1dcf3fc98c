"""The summary of a write job: the rows ``print(job)`` and a notebook's table show."""

from __future__ import annotations

import math

from shardpipe.core.display import format_bytes
from shardpipe.storage.base import ShardStore
from shardpipe.storage.parted_puts import goes_in_parts, part_size
from shardpipe.storage.uploads import request_limit
from shardpipe.write.spec import WriteSpec


def summary_rows(job: WriteSpec) -> list[tuple[str, str]]:
    """The plan's summary as ``(label, value)`` rows (what ``repr`` and the HTML show)."""
    plan, meta = job.plan, job.metadata
    location = job.target.path or "/"
    codecs = [str(c.to_dict()["name"]) for c in job.chunk_codec().codecs]
    peaks = {**plan.projected_peaks()}
    for kind, peak in plan.projected_peaks(in_process=True).items():
        if kind not in peaks or peak.nbytes > peaks[kind].nbytes:
            peaks[kind] = peak
    # an update's one task per shard is update-shard (planned like write-shard)
    name = {"write-shard": "update-shard"} if job.existing else {}
    sizes = {k: format_bytes(m.nbytes) for k, m in peaks.items()}
    if plan.n_multipart_shards and job.target.shards.abilities.parts_in_memory:
        # Icechunk: the stamp task joins the encoded parts into one object in memory
        shard_nbytes = math.prod(plan.layout.shard_shape) * plan.itemsize
        joined = peaks["stamp-shard"].nbytes + 2 * plan.model.encoded(shard_nbytes)
        sizes["stamp-shard"] = f"{format_bytes(joined)} (joins the shard: beyond max_mem)"
    memory = ", ".join(f"{name.get(k, k)} {size}" for k, size in sorted(sizes.items()))
    tasks = ", ".join(f"{name.get(k, k)} {n:,}" for k, n in sorted(plan.task_counts.items()))
    return [
        ("target", f"{_place(job)} at {location!r}"),
        (
            "array",
            f"shape {meta.shape}, dtype {job.source.dtype}, fill value {meta.fill_value}",
        ),
        (
            "layout",
            f"shards {plan.layout.shard_shape}, inner chunks {plan.layout.chunk_shape}, "
            f"index at the {job.shard_format.index_location}",
        ),
        ("inner codecs", " -> ".join(codecs) or "none"),
        (
            "source",
            f"{plan.blocks.shape} in {job.source.npartitions:,} Dask blocks "
            f"(largest {format_bytes(plan.block_nbytes)})",
        ),
        (
            "shards",
            f"{plan.n_shards:,} ({plan.n_multipart_shards:,} in parts; "
            + (
                f"{job.n_shards_skipped:,} complete already, skipped; "
                if job.skip or job.first_wave
                else ""
            )
            + f"{plan.n_parts:,} parts of up to {plan.part_chunks} inner chunks)",
        ),
        ("waves", _waves_row(job)),
        *_update_rows(job),
        ("tasks", f"{plan.num_tasks:,}: {tasks}"),
        ("bytes in", f"{format_bytes(plan.nbytes_in)} raw"),
        ("bytes out", f"at most {format_bytes(plan.nbytes_out_max)} encoded"),
        ("peak memory per task", f"{memory} (max_mem {format_bytes(plan.max_mem)})"),
        *_upload_rows(job),
    ]


def _upload_rows(job: WriteSpec) -> list[tuple[str, str]]:
    """Where shards go up in the background (an object store): how much is in flight."""
    if job.existing is not None or not job.target.shards.abilities.background_puts:
        return []
    return [
        (
            "uploads",
            f"in the background of each process: up to {request_limit()} requests and "
            f"{format_bytes(job.plan.max_mem)} (max_mem) in flight"
            + _parts_note(job.target.shards, part_size()),
        )
    ]


def _parts_note(store: ShardStore, size: int) -> str:
    """How shards large enough go up, where the store writes parts."""
    if not goes_in_parts(store, 2 * size, size):
        return ""
    return f"; shards of {format_bytes(2 * size)} or more in parts of {format_bytes(size)}"


def _place(job: WriteSpec) -> str:
    """The target store in one line (an Icechunk session by its branch and snapshot)."""
    target = job.target
    return str(target.shards if target.transactional else target.zarr_store)


def _waves_row(job: WriteSpec) -> str:
    schedule = job.wave_schedule()
    per_wave = min(schedule.max_shards, job.plan.n_shards)
    tasks = math.ceil(job.plan.num_tasks / max(job.plan.n_shards, 1) * per_wave)
    done = f", {job.first_wave:,} done" if job.first_wave else ""
    return f"{schedule.n_waves:,} of up to {per_wave:,} shards (~{tasks:,} tasks){done}"


def _update_rows(job: WriteSpec) -> list[tuple[str, str]]:
    existing = job.existing
    if existing is None:
        return []
    plan = job.plan
    what = "append" if existing.grown is not None else "region write"
    old_shape = tuple(existing.metadata.shape)
    return [
        (
            "update",
            f"{what} at {plan.placement.region} of {old_shape}"
            + (f" (grown to {tuple(job.metadata.shape)})" if existing.grown else "")
            + f", write_strategy {existing.strategy!r}",
        ),
        (
            "inner chunks",
            f"{plan.n_chunks_full:,} replaced, {plan.n_chunks_partial:,} merged with "
            "their old content",
        ),
    ]
