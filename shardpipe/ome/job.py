"""The OME-Zarr write job: an image and its labels, each a pyramid of planned level writes.

:func:`~shardpipe.ome.prepare.prepare_ome_zarr` checks every argument and
plans every level (writing nothing); the :class:`OmeZarrWrite` it returns
shows the plan (``print(job)``: levels, shards, tasks, projected memory per
task) and runs it (:meth:`OmeZarrWrite.execute`, :mod:`shardpipe.ome.run`).

Each level of each pyramid is a :class:`~shardpipe.write.job.ShardedWrite`
of the level's Dask array (:mod:`shardpipe.engine.pyramid`), so every
shard of every level has exactly one writing task, and all levels run in
one computation that reads the source once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shardpipe import advice
from shardpipe.core.display import format_bytes, html_table, text_table
from shardpipe.core.memory import HOLD_SHARE
from shardpipe.ome.multiscale import MultiscaleWrite
from shardpipe.ome.options import OME_PARAMETERS
from shardpipe.ome.report import OmeZarrReport
from shardpipe.ome.run import level_paths, pyramid_pass
from shardpipe.storage.resolve import ResolvedStore
from shardpipe.stored.locations import resolved_name
from shardpipe.write.job import Pass, PassReports, ShardedWrite, run_job
from shardpipe.write.parameters import shares_parameters

__all__ = ["OmeZarrWrite"]


@dataclass
class OmeZarrWrite:
    """A planned write of an OME-Zarr image group: run it with :meth:`execute`.

    Parameters
    ----------
    target : ResolvedStore
        The image group's location.
    image : MultiscaleWrite or None
        The image's pyramid (None when only labels are written into an
        existing image).
    labels : list of MultiscaleWrite
        One per label image.
    label_names : list of str
        Every name the ``labels`` group lists after the write.
    remove : list of str
        Groups removed before the write (``""``: the whole image group, with
        ``overwrite``; ``"labels/<name>"``: a label image replaced).
    identity : dict
        What the group's job record holds (for ``resume=True``).
    resume : bool
        Whether the run carries on an interrupted one.
    max_mem : int
        The memory budget per task.
    """

    target: ResolvedStore
    image: MultiscaleWrite | None
    labels: list[MultiscaleWrite]
    label_names: list[str]
    remove: list[str]
    identity: dict[str, Any]
    resume: bool
    max_mem: int

    @property
    def multiscales(self) -> list[MultiscaleWrite]:
        """The image's pyramid (if written) then each label image's."""
        return ([self.image] if self.image is not None else []) + self.labels

    @property
    def jobs(self) -> list[ShardedWrite]:
        """Every level's write, image first."""
        return [job for m in self.multiscales for job in m.jobs]

    @property
    def num_tasks(self) -> int:
        """Tasks of the whole computation (writes and downsampling)."""
        down = sum(int(j.source.npartitions) for m in self.multiscales for j in m.jobs[1:])
        return sum(j.plan.num_tasks for j in self.jobs) + down

    @property
    def max_projected_mem(self) -> int:
        """The largest projected memory of any task."""
        return max(
            max(max(j.plan.max_projected_mem for j in m.jobs), max(m.downsample_mem))
            for m in self.multiscales
        )

    def summary_rows(self) -> list[tuple[str, str]]:
        """The plan as ``(label, value)`` rows (what ``print`` and the HTML show)."""
        first = self.jobs[0]
        codecs = [str(c.to_dict()["name"]) for c in first.chunk_codec().codecs]
        rows = [
            ("target", f"{resolved_name(first.target)} at {self.target.path or '/'!r}"),
            ("format", "OME-Zarr 0.5 (Zarr v3, sharding_indexed)"),
            ("inner codecs", " -> ".join(codecs) or "none"),
        ]
        if self.image is not None:
            axes = "".join(a.name if len(a.name) == 1 else f"[{a.name}]" for a in self.image.axes)
            rows.append(
                (
                    "image",
                    f"axes {axes}, dtype {first.source.dtype}, {len(self.image.levels)} levels "
                    f"by {self.image.method}",
                )
            )
        for m in self.multiscales:
            rows.extend(m.rows())
        n_shards = sum(j.plan.n_shards for j in self.jobs)
        rows.append(("shards", f"{n_shards:,} in {len(self.jobs)} arrays, one task each"))
        rows.append(("tasks", f"{self.num_tasks:,} in one computation"))
        rows.append(
            (
                "peak memory per task",
                f"{format_bytes(self.max_projected_mem)} ({advice.name('max_mem')} "
                f"{format_bytes(self.max_mem)})",
            )
        )
        holds = [h for m in self.multiscales if m.hold is not None for h in m.hold.levels]
        if holds:
            held = sum(h.nbytes for h in holds)
            waiting = sum(h.waiting_nbytes for h in holds)
            rows.append(
                (
                    "blocks held",
                    f"{format_bytes(held)} between tasks at most, the levels' blocks read in "
                    f"order: {format_bytes(waiting)} waiting to be gathered (at most "
                    f"{HOLD_SHARE} x {advice.name('max_mem')}), the rest read ahead",
                )
            )
        return rows

    def __repr__(self) -> str:
        return text_table("OmeZarrWrite", self.summary_rows())

    def _repr_html_(self) -> str:
        return html_table("OmeZarrWrite", self.summary_rows())

    def passes(self) -> list[Pass]:
        """One pass: the groups, then every level (see :func:`shardpipe.ome.run.pyramid_pass`)."""
        return [
            pyramid_pass(
                self.target,
                self.multiscales,
                self.label_names,
                remove=self.remove,
                identity=self.identity,
            )
        ]

    def finish(
        self, reports: PassReports, seconds: float, snapshot_id: str | None
    ) -> OmeZarrReport:
        """Each level's report, by level path."""
        paths = level_paths(self.multiscales)
        return OmeZarrReport(dict(zip(paths, reports[0], strict=True)), seconds, snapshot_id)

    @shares_parameters(OME_PARAMETERS)
    def execute(
        self, *, progress: bool = False, commit: str | None = None, rebase: bool = False
    ) -> OmeZarrReport:
        """Write the group metadata, then every shard of every level; return the report.

        See :func:`shardpipe.ome.run.pyramid_pass`.

        Parameters
        ----------
        """
        return run_job(self, progress=progress, commit=commit, rebase=rebase)
