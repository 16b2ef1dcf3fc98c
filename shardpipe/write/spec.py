"""The frozen description of a write job: what is written where, and how it is planned.

A :class:`WriteSpec` is everything :func:`~shardpipe.write.prepare.prepare_write`
decided, and nothing that happens when the write runs: the source, the
target, the array's metadata, the plan, and the kind of write with what it
carries on (its ``mode``, :mod:`shardpipe.write.modes`). Starting a job
and running several together (:mod:`shardpipe.write.run`) read it, and
:func:`summary_rows` summarises it (the rows ``print(job)`` and a notebook's
table show); the job value users hold, :class:`~shardpipe.write.job.ShardedWrite`,
is a spec with the methods that run it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, replace
from typing import Any, Self

import dask.array as da
import numpy as np
from dask.system import CPU_COUNT

from shardpipe import advice
from shardpipe.codec.chunk_codec import ChunkCodec
from shardpipe.core.display import counted, format_bytes
from shardpipe.core.grid import Coords, ShardLayout
from shardpipe.core.plan import WritePlan
from shardpipe.core.waves import WaveSchedule, wave_shards
from shardpipe.engine.streaming import WAVES_PER_BATCH, wave_tasks
from shardpipe.engine.tasks import WriteTarget
from shardpipe.formats.zarr_sharding import ZarrShardingFormat
from shardpipe.internals.zarr_core import ArrayV3Metadata
from shardpipe.journal.markers import JobKeys
from shardpipe.storage.base import ShardStore
from shardpipe.storage.keys import STAGING_DIR
from shardpipe.storage.parted_puts import goes_in_parts, part_size
from shardpipe.storage.resolve import ResolvedStore
from shardpipe.storage.uploads import UploadRun, request_limit
from shardpipe.stored.locations import resolved_name
from shardpipe.stored.metadata import format_of
from shardpipe.write.arguments import ExistingArray
from shardpipe.write.modes import WriteMode
from shardpipe.write.resume import Resume


@dataclass(frozen=True)
class WriteSpec:
    """A write of a Dask array into a sharded Zarr v3 array, validated and planned.

    Attributes
    ----------
    source : dask.array.Array
        The data to write.
    target : ResolvedStore
        Where it goes.
    metadata : ArrayV3Metadata
        The array's metadata, as it will be written (for an append: grown).
    plan : WritePlan
        Which tasks write which shards, in how many parts, at what memory.
    mode : WriteMode
        The kind of write (:mod:`shardpipe.write.modes`): a new array
        (:class:`~shardpipe.write.modes.NewArray`), the fill of one whose
        metadata is written (:class:`~shardpipe.write.modes.FillExisting`), a
        region write or an append (:class:`~shardpipe.write.update_mode.Update`), a
        resumed write (:class:`~shardpipe.write.modes.Resumed`): how it begins
        and ends, and what it leaves alone.
    write_empty_chunks : bool
        Whether inner chunks equal to the fill value are stored.
    shared_source : bool
        The source's blocks feed other jobs run together with this one (the
        levels of a pyramid): the job runs as one wave, in one computation
        with those jobs, and its graph keeps the blocks as tasks of their own
        (see :func:`~shardpipe.engine.graph.build_write_graph`).
    """

    source: da.Array
    target: ResolvedStore
    metadata: ArrayV3Metadata
    plan: WritePlan
    mode: WriteMode
    _: KW_ONLY
    write_empty_chunks: bool
    shared_source: bool = False

    @property
    def create_kwargs(self) -> dict[str, Any] | None:
        """The arguments of ``zarr.create_array`` for a new array, else None (its ``mode``'s)."""
        return self.mode.create_kwargs

    @property
    def identity(self) -> dict[str, Any] | None:
        """What the job record holds, for the kinds that keep one, else None (its ``mode``'s)."""
        return self.mode.identity

    @property
    def skip(self) -> frozenset[Coords]:
        """Shards left alone because they are complete (its ``mode``'s)."""
        return self.mode.skip

    @property
    def first_wave(self) -> int:
        """The first wave a resumed write runs; those before it are done (its ``mode``'s)."""
        return self.mode.first_wave

    @property
    def overwrite(self) -> bool:
        """Whether an existing node at the target is replaced (a new array's ``mode``)."""
        return bool(getattr(self.mode, "overwrite", False))

    @property
    def existing(self) -> ExistingArray | None:
        """The array an update writes into, else None (an update's ``mode``)."""
        existing: ExistingArray | None = getattr(self.mode, "existing", None)
        return existing

    @property
    def rewrite_fits(self) -> bool:
        """For an update: whether rewriting a whole shard fits the budget (its ``mode``'s)."""
        return bool(getattr(self.mode, "rewrite_fits", True))

    @property
    def resume(self) -> Resume:
        """How a resumed write compares its job record, else False (its ``mode``'s)."""
        resume: Resume = getattr(self.mode, "resume", False)
        return resume

    @property
    def wave_size(self) -> int | None:
        """Shards per wave when the kind fixes it (a resumed write keeps its first run's)."""
        return self.mode.wave_size

    @property
    def in_memory(self) -> np.ndarray | None:
        """An update's source given as a NumPy array, else None (its ``mode``'s)."""
        return self.mode.in_memory

    @property
    def keys(self) -> JobKeys:
        """Keys of the array's job marker, undo records and staging area."""
        return JobKeys(self.target.key(""))

    @property
    def shard_format(self) -> ZarrShardingFormat:
        """The shard format of the target array."""
        return format_of(self.metadata)

    @property
    def layout(self) -> ShardLayout:
        """Shard and inner-chunk grids of the target array."""
        return self.plan.layout

    def wave_schedule(self, threads: int | None = None) -> WaveSchedule:
        """The waves the job runs in.

        A wave holds as many shards as an eighth of ``shardpipe.wave-tasks``
        tasks allow (:func:`~shardpipe.engine.streaming.wave_tasks`, counting the
        tasks of any scheduler; waves run in batches of about eight), and at
        least two per worker thread (``threads``, or this machine's cores),
        so that every thread has work.
        """
        plan = self.plan
        size = max(plan.n_shards, 1) if self.shared_source else self.mode.wave_size
        if size is None:
            per_shard = plan.num_tasks / max(plan.n_shards, 1)
            tasks = wave_tasks() // WAVES_PER_BATCH
            size = wave_shards(per_shard, tasks, 2 * (threads or CPU_COUNT), plan.n_shards)
        return WaveSchedule(plan.placement.shard_ranges, size)

    @property
    def n_shards_skipped(self) -> int:
        """Shards a resumed write leaves alone: those of its done waves and the complete others."""
        schedule = self.wave_schedule()
        done = sum(schedule.wave(k).n_shards for k in range(min(self.first_wave, schedule.n_waves)))
        return done + len(self.skip)

    def shards_left_alone(self) -> frozenset[Coords]:
        """The shards a resumed write leaves alone: those of its done waves and the
        complete others (none for a write that is not resumed)."""
        schedule = self.wave_schedule()
        waves = (schedule.wave(k) for k in range(min(self.first_wave, schedule.n_waves)))
        return self.skip | {c for wave in waves for c in itertools.product(*wave.ranges)}

    def blocks_read(self) -> list[Coords]:
        """The source's blocks (grid indices, each once) that feed the shards this run
        writes: every block, unless a resumed write leaves shards alone."""
        left = self.shards_left_alone()
        plan = self.plan
        if not left:
            return list(itertools.product(*(range(len(c)) for c in plan.blocks.chunks)))
        read: dict[Coords, None] = {}
        for shard in plan.shards_in(plan.placement.shard_ranges, skip=left):
            for part in shard.parts:
                read.update(dict.fromkeys(part.blocks))
        return list(read)

    def chunk_codec(self) -> ChunkCodec:
        """The codec chain inner chunks are encoded with, and their fill value."""
        return ChunkCodec.from_metadata(self.metadata, write_empty_chunks=self.write_empty_chunks)

    def write_target(self, token: str, *, uploads: str = "") -> WriteTarget:
        """What the tasks of the run ``token`` need to know of the array.

        ``uploads``: the group of a run that settles uploads its tasks hand
        on (:mod:`shardpipe.storage.uploads`); they do where the store's
        puts are worth it. Empty: every task puts its shards itself.
        """
        shards = self.target.shards
        run = None
        if uploads and shards.abilities.background_puts:
            run = UploadRun(uploads, request_limit(), self.plan.max_mem, part_size())
        return WriteTarget(
            store=self.target.shards,
            layout=self.layout,
            codec=self.chunk_codec(),
            shard_format=self.shard_format,
            staging=self.target.key(f"{STAGING_DIR}/{token}"),
            encoders=self.plan.encoders(CPU_COUNT),
            uploads=run,
        )

    def key_of(self) -> Callable[[Coords], str]:
        """The function from shard coordinates to the shard's key in the store."""
        shard_format, target = self.shard_format, self.target

        def key_of(coords: Coords) -> str:
            return target.key(shard_format.key(coords))

        return key_of

    def resumed(
        self,
        skip: frozenset[Coords],
        resume: Resume = True,
        *,
        first_wave: int = 0,
        wave_size: int | None = None,
    ) -> Self:
        """This write, into the array it already created, leaving the shards in ``skip`` alone.

        ``resume`` is how the job record is compared when the write starts;
        ``first_wave`` and ``wave_size`` carry on the first run's waves (see
        :class:`~shardpipe.write.modes.Resumed`).
        """
        return replace(self, mode=self.mode.resumed(skip, resume, first_wave, wave_size))


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
    name = job.mode.task_names
    sizes = {k: format_bytes(m.nbytes) for k, m in peaks.items()}
    if plan.n_multipart_shards and job.target.shards.abilities.parts_in_memory:
        # Icechunk: the stamp task joins the encoded parts into one object in memory
        shard_nbytes = math.prod(plan.layout.shard_shape) * plan.itemsize
        joined = peaks["stamp-shard"].nbytes + 2 * plan.model.encoded(shard_nbytes)
        sizes["stamp-shard"] = (
            f"{format_bytes(joined)} (joins the shard: beyond {advice.name('max_mem')})"
        )
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
            f"{plan.blocks.shape} in {counted(job.source.npartitions, 'Dask block')} "
            f"(largest {format_bytes(plan.block_nbytes)})",
        ),
        (
            "shards",
            f"{plan.n_shards:,} ({plan.n_multipart_shards:,} in parts; "
            + job.mode.shards_note(job.n_shards_skipped)
            + f"{counted(plan.n_parts, 'part')} of up to {plan.part_chunks} inner chunks)",
        ),
        ("waves", _waves_row(job)),
        *job.mode.summary_rows(plan, meta),
        ("tasks", f"{plan.num_tasks:,}: {tasks}"),
        ("bytes in", f"{format_bytes(plan.nbytes_in)} raw"),
        ("bytes out", f"at most {format_bytes(plan.nbytes_out_max)} encoded"),
        (
            "peak memory per task",
            f"{memory} ({advice.name('max_mem')} {format_bytes(plan.max_mem)})",
        ),
        *_upload_rows(job),
    ]


def _upload_rows(job: WriteSpec) -> list[tuple[str, str]]:
    """Where shards go up in the background (an object store): how much is in flight."""
    if not (job.mode.background_uploads and job.target.shards.abilities.background_puts):
        return []
    return [
        (
            "uploads",
            f"in the background of each process: up to {request_limit()} requests and "
            f"{format_bytes(job.plan.max_mem)} ({advice.name('max_mem')}) in flight"
            + _parts_note(job.target.shards, part_size()),
        )
    ]


def _parts_note(store: ShardStore, size: int) -> str:
    """How shards large enough go up, where the store writes parts."""
    if not goes_in_parts(store, 2 * size, size):
        return ""
    return f"; shards of {format_bytes(2 * size)} or more in parts of {format_bytes(size)}"


def _place(job: WriteSpec) -> str:
    """The target store in one line: its URL (an Icechunk session by its branch and snapshot)."""
    target = job.target
    return str(target.shards) if target.transactional else resolved_name(target)


def _waves_row(job: WriteSpec) -> str:
    schedule = job.wave_schedule()
    per_wave = min(schedule.max_shards, job.plan.n_shards)
    tasks = math.ceil(job.plan.num_tasks / max(job.plan.n_shards, 1) * per_wave)
    done = f", {job.first_wave:,} done" if job.first_wave else ""
    return f"{schedule.n_waves:,} of up to {per_wave:,} shards (~{tasks:,} tasks){done}"
