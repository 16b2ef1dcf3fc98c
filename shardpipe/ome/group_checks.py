"""What ``verify`` finds wrong with an OME-Zarr image group as a whole, beyond its arrays' shards.

Each level array is verified as any sharded array is (its shards, indexes,
inner chunks); this module adds the group's own findings: metadata that
does not parse as OME-Zarr 0.5, a level array missing or of another dtype,
levels whose shapes do not form the pyramid the metadata describes (of the
image and of every label image the ``labels`` group lists), and an
unfinished write or update recorded in the group (:mod:`shardpipe.ome.run`).
"""

from __future__ import annotations

from shardpipe import advice
from shardpipe.errors import InvalidArgumentError, MetadataError
from shardpipe.journal.unfinished import UnfinishedJob, same_call, started_at
from shardpipe.ome.run import GROUP_RECORD, read_group_record
from shardpipe.ome.stored import group_attributes, is_ome_image, read_image
from shardpipe.storage.resolve import ResolvedStore

__all__ = ["group_job", "label_names", "level_arrays", "ome_problems"]


def label_names(target: ResolvedStore) -> list[str]:
    """The names the image's ``labels`` group lists (none without one)."""
    try:
        attributes = group_attributes(target, "labels")
    except MetadataError:
        return []
    ome = attributes.get("ome") if attributes else None
    names = ome.get("labels") if isinstance(ome, dict) else None
    return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []


def level_arrays(target: ResolvedStore) -> list[str]:
    """Paths (inside the image group) of every level array: the image's, then each label's."""
    paths: list[str] = []
    for group in ["", *(f"labels/{n}" for n in label_names(target))]:
        inner = ResolvedStore(target.zarr_store, target.shards, target.key(group).rstrip("/"))
        try:
            stored = read_image(inner)
        except InvalidArgumentError:
            continue
        paths += ["/".join(p for p in (group, path) if p) for path in stored.multiscale.paths]
    return paths


def _image_problems(target: ResolvedStore, group: str) -> list[tuple[str, str]]:
    inner = ResolvedStore(target.zarr_store, target.shards, target.key(group).rstrip("/"))
    key = inner.key("zarr.json")
    try:
        stored = read_image(inner)
    except InvalidArgumentError as err:
        return [(key, f"not an OME-Zarr 0.5 image: {err.problem}")]
    return [(key, problem) for problem in stored.consistency_problems()]


def ome_problems(target: ResolvedStore) -> list[tuple[str, str]]:
    """``(key, problem)`` for what is wrong with the OME-Zarr image group at ``target``.

    Empty when the group is not an OME-Zarr image (nothing to add).
    """
    if not is_ome_image(target):
        return []
    problems = _image_problems(target, "")
    names = label_names(target)
    for name in names:
        problems += _image_problems(target, f"labels/{name}")
    try:
        job = group_job(target)
    except MetadataError as err:
        return [*problems, (target.key(GROUP_RECORD), str(err))]
    if job is not None:
        problems.append((job.key, job.describe()))
    return problems


def group_job(target: ResolvedStore) -> UnfinishedJob | None:
    """The write, update or conversion of the image group at ``target`` its record shows.

    None when the group records no job under way.

    Raises
    ------
    shardpipe.errors.MetadataError
        When the record is not a JSON object.
    """
    record = read_group_record(target)
    if record is None:
        return None
    doing = record.get("doing", "write")
    if doing == "write":
        fix = f"run {same_call('to_ome_zarr', 'write-ome-zarr')} with {advice.setting('resume')}"
    elif doing == "conversion":
        again = same_call("convert_ome_zarr", "convert-ome-zarr")
        fix = f"run {again} again with {advice.setting('overwrite')}"
    else:  # an update: "region" or "append"
        again = same_call("to_ome_zarr", "write-ome-zarr")
        fix = f"run {again} with {advice.setting('resume')}, or `shardpipe repair` on the group"
    return UnfinishedJob(
        "ome",
        target.key(GROUP_RECORD),
        f"the OME-Zarr image at {advice.place(target.path)}",
        started_at(record.get("started")),
        fix,
        {"region": "region write"}.get(str(doing), str(doing)),
    )
