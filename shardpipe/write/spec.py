"""The frozen description of a write job: what is written where, and how it is planned.

A :class:`WriteSpec` is everything :func:`~shardpipe.write.prepare.prepare_write`
decided, and nothing that happens when the write runs: the source, the
target, the array's metadata, the plan, and for updates and resumed writes
what they carry on. Starting a job (:mod:`shardpipe.write.started`),
running several together (:mod:`shardpipe.write.run`) and summarising one
(:mod:`shardpipe.write.summary`) read it; the job value users hold,
:class:`~shardpipe.write.job.ShardedWrite`, is a spec with the methods that
run it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field, replace
from typing import Any, Self

import dask.array as da
import numpy as np
from dask.system import CPU_COUNT

from shardpipe.codec.chunk_codec import ChunkCodec
from shardpipe.core.grid import Coords, ShardLayout
from shardpipe.core.plan import WritePlan
from shardpipe.core.waves import WaveSchedule, wave_shards
from shardpipe.engine.streaming import WAVES_PER_BATCH, wave_tasks
from shardpipe.engine.tasks import WriteTarget
from shardpipe.formats.zarr_sharding import ZarrShardingFormat
from shardpipe.internals.zarr_core import ArrayV3Metadata
from shardpipe.journal.markers import JobKeys
from shardpipe.storage.keys import STAGING_DIR
from shardpipe.storage.parted_puts import part_size
from shardpipe.storage.resolve import ResolvedStore
from shardpipe.storage.uploads import UploadRun, request_limit
from shardpipe.stored.metadata import format_of
from shardpipe.write.resume import Resume
from shardpipe.write.update_target import ExistingArray


@dataclass(frozen=True)
class WriteSpec:
    """A write of a Dask array into a sharded Zarr v3 array, validated and planned.

    Attributes
    ----------
    source : dask.array.Array
        The data to write.
    target : ResolvedStore
        Where it goes.
    create_kwargs : dict or None
        The arguments of ``zarr.create_array`` for a new array; None when
        the array's metadata is already written (xarray writes it for the
        accessor; a resumed write finds it), which the write then only fills.
    metadata : ArrayV3Metadata
        The array's metadata, as it will be written (for an append: grown).
    plan : WritePlan
        Which tasks write which shards, in how many parts, at what memory.
    overwrite : bool
        Whether an existing node at the target is replaced.
    write_empty_chunks : bool
        Whether inner chunks equal to the fill value are stored.
    existing : ExistingArray or None
        For a region write or an append: the array written into, where the
        source goes and the write strategy; None for a new array.
    rewrite_fits : bool
        For an update: whether rewriting a whole shard fits the budget.
    skip : frozenset of shard coordinates
        Shards left alone because they are complete (a resumed write).
    identity : dict or None
        For a new array: what the write's job record holds (its source and
        target metadata), saved beside the array so that ``resume=True`` can
        carry it on (:mod:`shardpipe.write.resume`); None for updates.
    resume : bool or "force"
        For a resumed write: how its job record is compared (again when it
        starts running: another job may have replaced the array meanwhile).
    first_wave : int
        For a resumed write: the first wave not recorded as done; the shards
        of the waves before it are complete and not looked at again.
    wave_size : int or None
        Shards per wave; None chooses them when the job runs
        (:meth:`wave_schedule`). A resumed write keeps its first run's.
    shared_source : bool
        The source's blocks feed other jobs run together with this one (the
        levels of a pyramid): the job runs as one wave, in one computation
        with those jobs, and its graph keeps the blocks as tasks of their own
        (see :func:`~shardpipe.engine.graph.build_write_graph`).
    in_memory : numpy.ndarray or None
        For an update whose source was given as a NumPy array: that array.
        An update of a few shards from it runs in the calling thread, with
        no graph (:mod:`shardpipe.write.in_thread`).
    """

    source: da.Array
    target: ResolvedStore
    create_kwargs: dict[str, Any] | None
    metadata: ArrayV3Metadata
    plan: WritePlan
    _: KW_ONLY
    overwrite: bool
    write_empty_chunks: bool
    existing: ExistingArray | None = None
    rewrite_fits: bool = True
    skip: frozenset[Coords] = field(default_factory=frozenset)
    identity: dict[str, Any] | None = None
    resume: Resume = False
    first_wave: int = 0
    wave_size: int | None = None
    shared_source: bool = False
    in_memory: np.ndarray | None = field(default=None, compare=False, repr=False)

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
        size = max(plan.n_shards, 1) if self.shared_source else self.wave_size
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
        ``first_wave`` and ``wave_size`` carry on the first run's waves.
        """
        return replace(
            self,
            create_kwargs=None,
            overwrite=False,
            existing=None,
            rewrite_fits=True,
            skip=skip,
            resume=resume,
            first_wave=first_wave,
            wave_size=wave_size,
        )
