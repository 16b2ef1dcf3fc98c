"""A real disk filling up under every write strategy: each shard old or new, readable at once.

Each scenario (``tests.support.full_disk_child``) runs in a fresh 8 MiB tmpfs left
with a few hundred KiB: region updates with ``write_strategy`` ``auto``,
``rewrite``, ``in_place``, ``append``, an ``append_dim`` append that grows the
array, and a new array whose shards are written in parts. Right after the error:
zarr-python reads the whole array; every shard holds its old data or its new data,
never a mix (the shard the error names: its old data); ``verify`` is clean, or names
exactly the shards the error says could not be rolled back; and the same write with
``resume=True`` completes the array once space is freed.

Mounting needs root, or a user and mount namespace (``unshare -rm``); the
test says which it used, and skips, saying why, only if neither works.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.support.fork_server import ForkServer
from tests.support.full_disk_child import run_child
from tests.support.run_once import once_per_run

STRATEGIES = ["auto", "rewrite", "in_place", "append", "append_dim", "parts"]
OLD_GRID_ROWS = 2  # append_dim: the shard rows along axis 0 before the append (48 of 32)
FREE_KIB = [64, 256, 450, 640, 1536]


@pytest.fixture(scope="session")
def results(
    tmp_path_factory: pytest.TempPathFactory, fork_server: ForkServer
) -> dict[tuple[str, int], dict[str, Any]]:
    scenarios = [{"strategy": s, "free_kib": f} for s in STRATEGIES for f in FREE_KIB]
    found = once_per_run(
        tmp_path_factory,
        "update-full-disk",
        lambda: run_child(
            "tests.support.full_disk_child", tmp_path_factory.mktemp("full"), scenarios, fork_server
        ),
    )
    return {(r["strategy"], r["free_kib"]): r for r in found}


def _named(notes: list[str], what: str) -> set[str]:
    return {m[1] for note in notes if (m := re.match(rf"shardpipe: shard '([^']+)' {what}", note))}


@pytest.mark.parametrize("free_kib", FREE_KIB)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_full_disk_leaves_every_shard_old_or_new(
    results: dict[tuple[str, int], dict[str, Any]], strategy: str, free_kib: int
) -> None:
    result = results[(strategy, free_kib)]
    assert "crash" not in result, result.get("crash")
    assert result["error"] in (None, "StorageFullError"), result
    assert result["whole_read"] == "ok", result
    states = result["shards"]
    assert set(states.values()) <= {"old", "new", "same"}, states
    if result["error"] is None:
        assert set(states.values()) <= {"new", "same"}, states
    else:
        notes = result["notes"]
        failed = result["failed_key"]
        if failed in states:  # a shard's write failed: it holds its old data
            assert states[failed] in ("old", "same"), (failed, states)
            if result["message"].startswith("writing into"):  # a positioned write, torn
                assert "Nothing was published" not in result["message"], result["message"]
                assert failed in _named(notes, "was rolled back to its old bytes"), notes
        left = _named(notes, "could not be rolled back")
        beyond = {k for k, p in result["verify"] if p.startswith("past the end of the array")}
        if beyond:  # shards an append wrote past the old shape: the error says so
            assert strategy == "append_dim", result["verify"]
            assert any("the append did not finish" in note for note in notes), notes
            assert all(int(k.split("/")[1]) >= OLD_GRID_ROWS for k in beyond), beyond
        assert {k for k, _ in result["verify"]} - beyond == left, (result["verify"], notes)
    assert result["resumed"], result


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_strategy_met_a_full_disk(
    results: dict[tuple[str, int], dict[str, Any]], strategy: str
) -> None:
    """The sizes are small enough that each strategy fails at least once (or nothing is tested)."""
    failed = [f for f in FREE_KIB if results[(strategy, f)]["error"] is not None]
    assert failed, f"{strategy}: no free size made it fail"
