"""Hostile layouts: nothing outside the store is read, written or deleted, by any command.

For every layout of :mod:`tests.hostile.layouts`, a child process forked from the fork server
(:mod:`tests.hostile.audit_child`) builds the layout afresh for each command,
runs the command with an audit hook recording every file it touches, and
reports. The test asserts, for every command:

* it touched nothing outside its store (the hook resolves links, so a
  link that leads out counts as the place it leads to);
* the decoy tree beside the store (files the hostile parts point to or
  name) has the same entries, bytes, modes and modification times;
* it ended in success or a ``ShardpipeError`` (one line on stderr for the
  command line), never another exception; where it must fail, it failed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.hostile.layouts import CONTROL_COMMANDS, LAYOUTS
from tests.support import REPOSITORY
from tests.support.fork_server import ForkServer

ROOT = REPOSITORY


def _run_layout(
    server: ForkServer, tmp_path: Path, name: str, settings: dict[str, Any]
) -> list[dict[str, Any]]:
    sandbox, report = tmp_path / "sandbox", tmp_path / "report.jsonl"
    sandbox.mkdir()
    own = sandbox / "run"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "HOME": str(own),
        "TMPDIR": str(own),
        "XDG_CONFIG_HOME": str(own),
        "DASK_ROOT_CONFIG": str(own),
        "DASK_CONFIG": str(own),
        "DASK_SCHEDULER": "synchronous",
    }
    args = [str(sandbox), name, str(report), json.dumps(settings)]
    child = server.start("tests.hostile.audit_child", args, cwd=ROOT, env=env)
    assert child.wait(timeout=600) == 0, child.stderr()[-3000:]
    return [json.loads(line) for line in report.read_text().splitlines()]


def _check(results: list[dict[str, Any]], count: int) -> None:
    assert len(results) == count
    problems = []
    for result in results:
        what = result["command"]
        if result["touched"]:
            problems.append(f"{what}: touched outside the store: {result['touched']}")
        if result["decoy_changed"]:
            problems.append(f"{what}: changed the decoy: {result['decoy_changed']}")
        if result["outcome"] == "crash":
            problems.append(f"{what}: not a ShardpipeError: {result['detail']}")
        if result["expect"] == "refused" and result["outcome"] != "refused":
            problems.append(f"{what}: should have been refused, was {result['outcome']}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name", [n for n in LAYOUTS if not n.startswith("s3_")])
def test_nothing_outside_the_store_is_touched(
    fork_server: ForkServer, tmp_path: Path, name: str
) -> None:
    _check(_run_layout(fork_server, tmp_path, name, {}), len(LAYOUTS[name].commands))


@pytest.mark.s3
@pytest.mark.parametrize("name", [n for n in LAYOUTS if n.startswith("s3_")])
def test_nothing_outside_the_store_is_touched_from_s3(
    fork_server: ForkServer, tmp_path: Path, name: str, s3_bucket: tuple[str, dict[str, Any]]
) -> None:
    bucket, options = s3_bucket
    settings = {"bucket": bucket, "storage_options": options}
    _check(_run_layout(fork_server, tmp_path, name, settings), len(LAYOUTS[name].commands))


def test_the_audit_reports_what_a_command_touched_outside(
    fork_server: ForkServer, tmp_path: Path
) -> None:
    """The control layout's commands read, list and write the decoy (one through a link):
    the audit of the forked child sees each, and a temporary file lands in its own folder."""
    results = {r["command"]: r for r in _run_layout(fork_server, tmp_path, "control", {})}
    assert list(results) == [c.name for c in CONTROL_COMMANDS]
    decoy = [f"{tmp_path / 'sandbox' / f'case{n}' / 'decoy'}" for n in range(len(results))]
    assert f"open {decoy[0]}/secret" in results["read the secret"]["touched"]
    assert f"open {decoy[1]}/secret" in results["read through the link"]["touched"]
    assert f"os.listdir {decoy[2]}" in results["list the decoy"]["touched"]
    assert f"open {decoy[3]}/victim.txt" in results["write the victim"]["touched"]
    assert results["write the victim"]["decoy_changed"] == ["victim.txt"]
    assert results["a temporary file"]["touched"] == [], results["a temporary file"]
    assert all(r["outcome"] == "ok" for r in results.values()), results
