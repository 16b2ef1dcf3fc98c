"""``repair`` of an OME-Zarr image group: its arrays, then the update it records.

Every level array (the image's and each label image's) is repaired as any
sharded array is (shards left mid-update rolled back, leftovers removed),
by the function the caller passes (:func:`shardpipe.maintenance.repairs.repair`
on one array). Then the group's record of an interrupted update is settled:

* an **append** is rolled back: the levels already grown get their old
  shapes back first (the array repairs then remove the shards past them),
  so that every level holds the image before the append;
* a **region write** is finished from level 0: every lower level's voxels
  whose windows touch the region are computed again from level 0 as it
  is, so that the pyramid agrees with it;
* an unfinished **pyramid write** cannot be finished without its source:
  its record stays (``verify`` keeps reporting it) until the same write is
  run with ``resume=True``, or the group is written anew.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from shardpipe import advice
from shardpipe.core.downsample import METHODS
from shardpipe.ome.group_checks import level_arrays
from shardpipe.ome.run import delete_group_record, read_group_record
from shardpipe.ome.stored import read_image
from shardpipe.ome.update import recompute_levels, roll_back_append
from shardpipe.storage.resolve import ResolvedStore
from shardpipe.write.job import run_jobs
from shardpipe.write.options import DEFAULT_ARRAY_OPTIONS

__all__ = ["GroupRepair", "repair_group"]


@dataclass
class GroupRepair:
    """What :func:`repair_group` did.

    Attributes
    ----------
    arrays : dict
        The array repair's result for each level array, by its path.
    notes : list of str
        What was done to the group, or left for the user.
    """

    arrays: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def repair_group(
    target: ResolvedStore, repair_array: Callable[[ResolvedStore], Any]
) -> GroupRepair:
    """Repair every level array of the image group at ``target``, then settle its record.

    A region write is finished with the default options (``repair`` takes no
    budget: the levels are computed again under the default ``max_mem``).
    """
    done = GroupRepair()
    record = read_group_record(target)
    doing = record.get("doing", "write") if record is not None else None
    if record is not None and doing == "append":
        shrunk = roll_back_append(target, record)
        done.notes.append(
            "rolled back an interrupted append"
            + (f": levels {', '.join(shrunk)} have their old shapes again" if shrunk else "")
        )
    for path in level_arrays(target):
        array = ResolvedStore(target.zarr_store, target.shards, target.key(path))
        done.arrays[path] = repair_array(array)
    if record is None:
        return done
    if doing == "region":
        stored = read_image(target)
        box = tuple(tuple(b) for b in record.get("identity", {}).get("region", []))
        method = stored.multiscale.method
        if method in METHODS and len(box) == len(stored.shapes[0]):
            jobs, paths = recompute_levels(target, stored, box, str(method), DEFAULT_ARRAY_OPTIONS)
            if jobs:
                run_jobs(jobs)
            done.notes.append(
                f"finished an interrupted region write: levels {', '.join(paths) or 'none'} "
                f"computed again from level 0 over {[list(b) for b in box]}"
            )
        else:
            done.notes.append("an interrupted region write could not be finished (unknown method)")
            return done
    if doing == "write":
        done.notes.append(
            "the group records an unfinished pyramid write: run the same write again with "
            f"{advice.setting('resume')} to finish it (repair cannot: it needs the source)"
        )
        return done
    if doing == "conversion":
        done.notes.append(
            "the group records an unfinished conversion: run the same conversion again with "
            f"{advice.setting('overwrite')} to finish it (repair cannot: it needs the source)"
        )
        return done
    delete_group_record(target)
    return done
