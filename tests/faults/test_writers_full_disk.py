"""A real disk filling up under OME-Zarr writes, conversions and dataset writes, then recovery.

Each scenario (``tests.support.writers_full_disk_child``) runs in a fresh 8 MiB
tmpfs left with a few KiB to a few hundred KiB, so that the disk fills at
every early step of the write (the group's record, the group metadata zarr
writes, each level's record and ``zarr.json``, the first shards) and later.
Whatever the step, the write ends with :class:`~shardpipe.errors.StorageFullError`
naming the key (never zarr's raw ``OSError``), and once space is freed the
recovery the guides give (``resume=True`` for ``to_ome_zarr`` and for an
append to an image, the same call with ``overwrite=True`` for
``convert_ome_zarr``, ``mode="w"`` for a new dataset; the last two say so in a
note of the error) completes: every group and array equals the one written on a disk
with room, and ``verify`` is clean. ``resume=True`` after an image write that
succeeded returns and changes nothing.

Mounting needs root, or a user and mount namespace (``unshare -rm``); the
test skips, saying why, only if neither works.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.fork_server import ForkServer
from tests.support.full_disk_child import run_child
from tests.support.run_once import once_per_run

KINDS = ["ome", "ome_append", "convert", "dataset"]
RECOVERY_NOTES = {
    "convert": "run the same conversion again with overwrite=True",
    "dataset": "write it again with mode='w'",
}
FREE_KIB = [0, 4, 8, 12, 16, 20, 24, 28, 36, 48, 96, 4096]


@pytest.fixture(scope="session")
def results(
    tmp_path_factory: pytest.TempPathFactory, fork_server: ForkServer
) -> dict[tuple[str, int], dict[str, Any]]:
    scenarios = [{"kind": k, "free_kib": f} for k in KINDS for f in FREE_KIB]
    found = once_per_run(
        tmp_path_factory,
        "writers-full-disk",
        lambda: run_child(
            "tests.support.writers_full_disk_child",
            tmp_path_factory.mktemp("full"),
            scenarios,
            fork_server,
        ),
    )
    return {(r["kind"], r["free_kib"]): r for r in found}


@pytest.mark.parametrize("free_kib", FREE_KIB)
@pytest.mark.parametrize("kind", KINDS)
def test_a_full_disk_raises_storage_full_then_the_recovery_completes(
    results: dict[tuple[str, int], dict[str, Any]], kind: str, free_kib: int
) -> None:
    result = results[(kind, free_kib)]
    assert "crash" not in result, result.get("crash")
    assert result["error"] in (None, "StorageFullError"), result
    if result["error"] is not None:
        assert "No space left on device" in result["message"], result["message"]
        assert result["message"].startswith(("writing '", "deleting '")), result["message"]
        recovery = RECOVERY_NOTES.get(kind)
        if recovery is not None and "ome-write.json" not in result["message"]:  # began writing
            assert any(recovery in note for note in result["notes"]), result["notes"]
    assert result["recovered"] == "ok", result
    assert result["differs"] is None, result
    assert result["verify"] == [], result
    if kind == "dataset":
        assert result["dataset_equal"], result


@pytest.mark.parametrize("kind", ["ome", "convert", "dataset"])  # an append writes none
def test_the_disk_filled_in_zarrs_own_metadata_writes(
    results: dict[tuple[str, int], dict[str, Any]], kind: str
) -> None:
    """Some sizes make zarr's own write of a ``zarr.json`` fail (or nothing above is tested),
    and the largest one leaves room for the whole write."""
    named = [r["message"] for r in results.values() if r["kind"] == kind and r["error"]]
    assert any("zarr.json'" in m for m in named), named
    assert results[(kind, FREE_KIB[-1])]["error"] is None
