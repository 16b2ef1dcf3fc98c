"""kill -9 at the steps around the metadata of a write, then ``resume=True``.

Processes forked by ``tests.support.kill_at_key_child`` (itself forked from the fork
server) write an OME-Zarr image with a label image, or an array, and are killed right
after a chosen key is written or deleted: a level's ``zarr.json`` (before its job
record, in the order writes had before this was fixed), a level's job record, a group's
``zarr.json``, and the group's record removed at the very end; or inside zarr's own
write of a ``zarr.json`` (a group's, a level's, an array's), its temporary
``zarr.<uuid>.partial`` written and not renamed. The kill waits for the step, and for
every write under way to end, so it lands at the same place in every run. Whatever the
step, the same call with ``resume=True`` completes the write: every group and array
equals the one a write without a kill makes, nothing temporary is left, and ``verify``
is clean.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dask
import pytest

import shardpipe
from tests.support.fork_server import ForkServer
from tests.support.kill_at_key_child import kill_at_keys, write_array
from tests.support.ome_checks import left_by_an_unfinished_write
from tests.support.run_once import once_per_run
from tests.support.writers_full_disk_child import same_tree, write_ome

POINTS = [
    ("ome", "1/zarr.json", "written"),
    ("ome", "1/.shardpipe/write.json", "written"),
    ("ome", "labels/mask/0/zarr.json", "written"),
    ("ome", "labels/zarr.json", "written"),
    ("ome", ".shardpipe/ome-write.json", "deleted"),
    ("array", "a/zarr.json", "written"),
    ("ome", "labels/zarr.json", "partial"),
    ("ome", "1/zarr.json", "partial"),
    ("array", "a/zarr.json", "partial"),
]


@pytest.fixture(scope="session")
def killed(
    tmp_path_factory: pytest.TempPathFactory, fork_server: ForkServer
) -> list[dict[str, Any]]:
    """Each point's write, killed there (each test resumes its own target)."""

    def kill() -> list[dict[str, Any]]:
        return kill_at_keys(tmp_path_factory.mktemp("killed"), POINTS, 300, fork_server)

    killed: list[dict[str, Any]] = once_per_run(tmp_path_factory, "killed-at-metadata", kill)
    return killed


@pytest.fixture(scope="session")
def references(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("references")
    with dask.config.set(scheduler="threads"):
        write_ome(root / "ome.zarr")
        write_array(root / "array.zarr")
    return {"ome": root / "ome.zarr", "array": root / "array.zarr"}


@pytest.mark.parametrize("number", range(len(POINTS)), ids=["-".join(p) for p in POINTS])
def test_kill_at_a_metadata_step_then_resume(
    killed: list[dict[str, Any]], references: dict[str, Path], number: int
) -> None:
    what = POINTS[number][0]
    assert killed[number]["killed"], killed[number]  # the process met its key, and died there
    target = Path(killed[number]["target"])
    if what == "ome" and (target / "zarr.json").exists():  # what the kill left: no torn shard
        left = shardpipe.verify(str(target)).problems
        assert all(left_by_an_unfinished_write(problem) for _, problem in left), left
    with dask.config.set(scheduler="threads"):
        if what == "ome":
            write_ome(target, resume=True)
        else:
            write_array(target, resume=True)
    assert same_tree(target, references[what]) is None
    left = [str(p.relative_to(target)) for p in target.rglob("*") if p.name.endswith(".partial")]
    assert left == [], "zarr's temporary files of a killed metadata write are still there"
    report = shardpipe.verify(str(target), **({"path": "a"} if what == "array" else {}))
    assert report.ok, str(report)
    if what == "ome":
        assert shardpipe.verify(str(target), complete=True).ok
