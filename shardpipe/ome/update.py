"""Updates of an OME-Zarr image: appends to every level, region writes with the levels below.

**Append** (``append_dim``): the new data (time points, say) is downsampled
level by level in one pass, and each level array grows by its share, as
:func:`~shardpipe.to_sharded_zarr` appends (each level's grown ``zarr.json``
is published after its shards). Along an axis the pyramid downsamples, the
old length must be a multiple of the coarsest level's factor, so that no
window already written changes.

**Region write** (``region``, in level-0 coordinates): in phase 1 the
region of level 0 is written as a region write; in phase 2 every lower
level's voxels whose windows touch the region are computed again, in one
pass, from level 0 read back (the region widened to whole windows of the
coarsest level: the voxels around the region are only there), and written
as region writes.

Both run with the crash safety of the update strategies (each shard's
change is undone or finished as a single write's would be) and record the
update in the group (:data:`~shardpipe.storage.keys.OME_GROUP_RECORD`) until it is done: an
interrupted update is carried on by the same call with ``resume=True``, or
settled by ``shardpipe repair`` (an append rolled back to the old shapes; a
region write's lower levels computed again from level 0).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import dask.array as da
import zarr

from shardpipe import advice
from shardpipe.core.checks import is_integer
from shardpipe.core.display import format_bytes, html_table, text_table
from shardpipe.core.downsample import METHODS
from shardpipe.core.grid import Box, Shape
from shardpipe.core.pyramid import level_region, level_shape, steps_of, window_region
from shardpipe.engine.reports import WriteReport
from shardpipe.errors import InvalidArgumentError
from shardpipe.internals.zarr_core import ArrayV3Metadata
from shardpipe.ome.arguments import check_image
from shardpipe.ome.prepare import pyramid_arrays
from shardpipe.ome.report import OmeZarrReport
from shardpipe.ome.run import GROUP_RECORD, delete_group_record, read_group_record
from shardpipe.ome.stored import StoredImage, read_image
from shardpipe.storage.resolve import ResolvedStore
from shardpipe.stored.metadata import metadata_bytes, read_node_metadata
from shardpipe.write.arguments import region_offset
from shardpipe.write.job import Pass, PassReports, ShardedWrite, run_job
from shardpipe.write.options import DEFAULT_ARRAY_OPTIONS, ArrayOptions
from shardpipe.write.prepare import prepare_checked

__all__ = [
    "OmeZarrUpdate",
    "prepare_ome_update",
    "recompute_levels",
    "roll_back_append",
]


@dataclass
class OmeZarrUpdate:
    """A planned append to, or region write of, an OME-Zarr image; run it with :meth:`execute`.

    Parameters
    ----------
    target : ResolvedStore
        The image group.
    kind : {"append", "region"}
        What it does.
    phases : list of list of ShardedWrite
        The level writes, run phase after phase (an append has one phase;
        a region write two: level 0, then the levels below).
    paths : list of list of str
        The level arrays each phase writes.
    record : dict
        The group's record of the update, saved while it runs.
    first_phase : int
        The phase to start at (a resumed region write whose level 0 is done
        starts at 1).
    """

    target: ResolvedStore
    kind: str
    phases: list[list[ShardedWrite]]
    paths: list[list[str]]
    record: dict[str, Any]
    first_phase: int = 0

    def summary_rows(self) -> list[tuple[str, str]]:
        """The plan as ``(label, value)`` rows."""
        rows = [("update", f"{self.kind} of the OME-Zarr image at {self.target.path or '/'!r}")]
        for number, (jobs, paths) in enumerate(zip(self.phases, self.paths, strict=True)):
            skipped = " (done, skipped)" if number < self.first_phase else ""
            for job, path in zip(jobs, paths, strict=True):
                plan = job.plan
                rows.append(
                    (
                        f"phase {number + 1} level {path}",
                        f"{plan.placement.region} of {tuple(job.metadata.shape)}, "
                        f"{plan.n_shards:,} shard(s), {plan.num_tasks:,} tasks, peak "
                        f"{format_bytes(plan.max_projected_mem)}{skipped}",
                    )
                )
        return rows

    def __repr__(self) -> str:
        return text_table("OmeZarrUpdate", self.summary_rows())

    def _repr_html_(self) -> str:
        return html_table("OmeZarrUpdate", self.summary_rows())

    def passes(self) -> list[Pass]:
        """One pass per phase not done yet; each saves the group's record of the phase first."""
        transactional = self.target.transactional
        last = len(self.phases) - 1

        def phase(number: int) -> Pass:
            def begin(_: bool) -> list[ShardedWrite]:
                if not transactional:
                    _save(self.target, {**self.record, "phase": number})
                return self.phases[number]

            def end(_: Sequence[WriteReport]) -> None:
                if number == last and not transactional:
                    delete_group_record(self.target)

            def abandon(err: BaseException) -> None:
                if not transactional:
                    err.add_note(
                        f"shardpipe: the {self.kind} of the OME-Zarr image did not finish; run "
                        f"the same call with {advice.setting('resume')}, or `shardpipe repair` "
                        "on the group"
                    )

            return Pass(f"phase {number + 1}", begin, end, abandon)

        return [phase(n) for n in range(self.first_phase, len(self.phases))]

    def finish(
        self, reports: PassReports, seconds: float, snapshot_id: str | None
    ) -> OmeZarrReport:
        """Each level's report, by level path."""
        written: dict[str, WriteReport] = {}
        for paths, done in zip(self.paths[self.first_phase :], reports, strict=True):
            written.update(zip(paths, done, strict=True))
        return OmeZarrReport(written, seconds, snapshot_id)

    def execute(
        self, *, progress: bool = False, commit: str | None = None, rebase: bool = False
    ) -> OmeZarrReport:
        """Run the phases; return each level's report."""
        return run_job(self, progress=progress, commit=commit, rebase=rebase)


def _save(target: ResolvedStore, record: dict[str, Any]) -> None:
    target.shards.put(target.key(GROUP_RECORD), [json.dumps(record).encode()])


def _axis(append_dim: Any, stored: StoredImage) -> int:
    names = [a.name for a in stored.multiscale.axes]
    if isinstance(append_dim, str) and append_dim in names:
        return names.index(append_dim)
    if is_integer(append_dim) and -len(names) <= int(append_dim) < len(names):
        return int(append_dim) % len(names)
    raise InvalidArgumentError(
        "append_dim",
        f"{append_dim!r} is not an axis of the image {names}",
        f"Pass an axis name such as {names[0]!r}, or its index",
    )


def _check_consistent(stored: StoredImage) -> None:
    problems = stored.consistency_problems()
    if problems:
        raise InvalidArgumentError(
            "store",
            f"the image's levels do not form a pyramid ({'; '.join(problems)})",
            "Run `shardpipe repair` on the group (an interrupted update), or rewrite it",
        )


def _method(stored: StoredImage) -> str:
    method = stored.multiscale.method
    if method not in METHODS:
        raise InvalidArgumentError(
            "store",
            f"the image's levels were made by {method!r}, not one of shardpipe's {METHODS}: "
            "its lower levels cannot be computed the same way",
            "Rewrite the image with to_ome_zarr to update it",
        )
    return str(method)


def _record_for(
    target: ResolvedStore, resume: bool, identity: dict[str, Any]
) -> dict[str, Any] | None:
    """The group's record of this same update when resuming (None: start afresh).

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        When another write or update is recorded as under way.
    """
    record = read_group_record(target)
    if record is None:
        return None
    same = record.get("identity") == identity
    if resume and same:
        return record
    doing = record.get("doing", "write")
    raise InvalidArgumentError(
        "resume" if resume else "store",
        f"the group records an unfinished {doing} ({target.key(GROUP_RECORD)})"
        + (" of other data" if resume else ""),
        f"Carry it on with the same call and {advice.setting('resume')}, or settle it with "
        "`shardpipe repair`",
    )


def prepare_ome_update(
    image: Any,
    target: ResolvedStore,
    *,
    axes: Any = None,
    region: Any = None,
    append_dim: Any = None,
    options: ArrayOptions = DEFAULT_ARRAY_OPTIONS,
) -> OmeZarrUpdate:
    """Validate and plan an append to (``append_dim``) or a region write of the image at ``target``.

    Parameters
    ----------
    options : ArrayOptions
        The options of every level's write, checked by the door
        (:func:`~shardpipe.write.options.check_array_options`): its
        ``write_strategy``, ``max_mem`` and ``resume`` (True or False); the
        rest at their defaults. Each level's write sets its ``path`` and its
        ``region`` or ``append_dim``, and is planned without checking them again.

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        On bad arguments, an image whose levels do not form a pyramid, or
        an append that would change windows already written.
    """
    resume = bool(options.resume)
    if region is not None and append_dim is not None:
        raise InvalidArgumentError("region", "given together with append_dim", "Pass one of them")
    stored = read_image(target)
    _check_consistent(stored)
    method = _method(stored)
    names = [a.name for a in stored.multiscale.axes]
    picture = check_image(image, axes if axes is not None else names, None, None, None)
    if [a.name for a in picture.axes] != names:
        raise InvalidArgumentError(
            "axes",
            f"{[a.name for a in picture.axes]} differ from the image's axes {names}",
            "Leave axes out, or pass the image's",
        )
    data = picture.data
    if data.dtype != stored.dtype:
        raise InvalidArgumentError(
            "image",
            f"dtype {data.dtype} differs from the stored image's {stored.dtype}",
            f"Cast the data, e.g. image.astype({str(stored.dtype)!r})",
        )
    paths = list(stored.multiscale.paths)
    if append_dim is not None:
        return _prepare_append(data, target, stored, _axis(append_dim, stored), method, options)
    if region is None:
        raise InvalidArgumentError(
            "region", "neither region nor append_dim given", "Pass one of them"
        )
    offset = region_offset(region, stored.shapes[0], tuple(data.shape))
    box = tuple((o, o + n) for o, n in zip(offset, data.shape, strict=True))
    identity = {"doing": "region", "source": data.name, "region": [list(b) for b in box]}
    record = _record_for(target, resume, identity)
    first = prepare_checked(data, target, replace(options, path=paths[0], region=region))
    lower, lower_paths = recompute_levels(target, stored, box, method, options)
    first_phase = int(record.get("phase", 0)) if record is not None else 0
    return OmeZarrUpdate(
        target,
        "region",
        [[first], lower],
        [[paths[0]], lower_paths],
        {"doing": "region", "identity": identity},
        first_phase,
    )


def _prepare_append(
    data: da.Array,
    target: ResolvedStore,
    stored: StoredImage,
    axis: int,
    method: str,
    options: ArrayOptions,
) -> OmeZarrUpdate:
    factors = stored.factors
    paths = list(stored.multiscale.paths)
    old = stored.shapes[0]
    for d, (n, m) in enumerate(zip(old, data.shape, strict=True)):
        if d != axis and n != m:
            raise InvalidArgumentError(
                "append_dim",
                f"the data's shape {tuple(data.shape)} differs from the image's {old} along "
                f"{stored.multiscale.axes[d].name!r}",
                "Append data that matches the image along every other axis",
            )
    coarsest = max(f[axis] for f in factors)
    if old[axis] % coarsest:
        raise InvalidArgumentError(
            "append_dim",
            f"level 0's length {old[axis]} along {stored.multiscale.axes[axis].name!r} is not a "
            f"multiple of the coarsest level's factor {coarsest} along it: the last windows "
            "already written would change",
            "Append along an axis the pyramid does not downsample (time), or rewrite the image",
        )
    grown = tuple(n + (data.shape[axis] if d == axis else 0) for d, n in enumerate(old))
    new_shapes = [level_shape(grown, f) for f in factors]
    identity = {
        "doing": "append",
        "source": data.name,
        "axis": axis,
        "old": [list(s) for s in stored.shapes],
        "new": [list(s) for s in new_shapes],
    }
    resume = bool(options.resume)
    _record_for(target, resume, identity)
    arrays, _ = pyramid_arrays(
        data, steps_of(factors), method, budget=options.max_mem, what=target.path or "image"
    )
    jobs, written = [], []
    for path, array, shape, new in zip(paths, arrays, stored.shapes, new_shapes, strict=True):
        if resume and shape == new:  # this level grew before the interruption
            continue
        job = prepare_checked(array, target, replace(options, path=path, append_dim=axis))
        jobs.append(replace(job, shared_source=len(paths) > 1))
        written.append(path)
    return OmeZarrUpdate(
        target, "append", [jobs], [written], {"doing": "append", "identity": identity}
    )


def recompute_levels(
    target: ResolvedStore,
    stored: StoredImage,
    box: Box,
    method: str,
    options: ArrayOptions,
) -> tuple[list[ShardedWrite], list[str]]:
    """The region writes computing every level below level 0 again where ``box`` touches it.

    The box of level 0, widened to whole windows of the coarsest level, is
    read back from level 0 and downsampled level by level in one pass; each
    level writes the voxels whose windows touch ``box``, with ``options``
    (checked already, as in :func:`prepare_ome_update`) and its own ``path``
    and ``region``.
    """
    factors = stored.factors
    paths = list(stored.multiscale.paths)
    if len(paths) < 2 or any(a == b for a, b in box):
        return [], []
    shape0 = stored.shapes[0]
    wide = window_region(box, factors[-1], shape0)
    level0 = zarr.open_array(target.zarr_store, path=target.key(paths[0]), mode="r", zarr_format=3)
    source = da.from_zarr(level0)[tuple(slice(a, b) for a, b in wide)]
    arrays, _ = pyramid_arrays(
        source, steps_of(factors), method, budget=options.max_mem, what=target.path or "image"
    )
    jobs, written = [], []
    for k in range(1, len(paths)):
        wanted = level_region(box, factors[k], stored.shapes[k])
        origin = [a // f for (a, _), f in zip(wide, factors[k], strict=True)]
        part = arrays[k][
            tuple(slice(a - o, b - o) for (a, b), o in zip(wanted, origin, strict=True))
        ]
        region = tuple(slice(a, b) for a, b in wanted)
        job = prepare_checked(part, target, replace(options, path=paths[k], region=region))
        jobs.append(replace(job, shared_source=len(paths) > 2))
        written.append(paths[k])
    return jobs, written


def roll_back_append(target: ResolvedStore, record: dict[str, Any]) -> list[str]:
    """Give every level grown by an interrupted append its old shape back; return those levels.

    The shards past the old shapes are left for the level arrays' own
    repair (``_remove_past_grid``) to remove.
    """
    identity = record.get("identity", {})
    old: Sequence[Shape] = [tuple(s) for s in identity.get("old", [])]
    stored_paths = read_image(target).multiscale.paths
    shrunk = []
    for path, shape in zip(stored_paths, old, strict=False):
        key = target.key(f"{path}/zarr.json")
        metadata = read_node_metadata(target.shards, key)
        if not isinstance(metadata, ArrayV3Metadata):
            continue
        if tuple(metadata.shape) != tuple(shape):
            target.shards.put(key, [metadata_bytes(metadata.update_shape(tuple(shape)))])
            shrunk.append(path)
    return shrunk
