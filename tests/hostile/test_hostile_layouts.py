"""Hostile layouts: nothing outside the store is read, written or deleted, by any command.

For every layout of :mod:`tests.hostile.layouts`, a child process
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
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.hostile.layouts import LAYOUTS
from tests.support import REPOSITORY

ROOT = REPOSITORY


def _run_layout(tmp_path: Path, name: str, settings: dict[str, Any]) -> list[dict[str, Any]]:
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
    command = [sys.executable, "-m", "tests.hostile.audit_child", str(sandbox), name, str(report)]
    child = subprocess.run(
        [*command, json.dumps(settings)], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert child.returncode == 0, child.stderr[-3000:]
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
def test_nothing_outside_the_store_is_touched(tmp_path: Path, name: str) -> None:
    _check(_run_layout(tmp_path, name, {}), len(LAYOUTS[name].commands))


@pytest.mark.s3
@pytest.mark.parametrize("name", [n for n in LAYOUTS if n.startswith("s3_")])
def test_nothing_outside_the_store_is_touched_from_s3(
    tmp_path: Path, name: str, s3_bucket: tuple[str, dict[str, Any]]
) -> None:
    bucket, options = s3_bucket
    settings = {"bucket": bucket, "storage_options": options}
    _check(_run_layout(tmp_path, name, settings), len(LAYOUTS[name].commands))
