"""The names shardpipe reserves are spelled in one module only: :mod:`shardpipe.storage.keys`.

Every other module of the package names the job folder, its records and the
temporary files' suffix through that module's constants (code and docstrings
alike), so that a name changes in one place. The names looked for are taken
from the keys module itself: a reserved name added there is covered at once.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import shardpipe
from shardpipe.storage import keys

PACKAGE = Path(shardpipe.__file__).parent
ALLOWED = PACKAGE / "storage" / "keys.py"


def _reserved_names() -> set[str]:
    """The job folder, the temporary suffix and each record file's own name (``*.json``)."""
    names = {keys.JOB_DIR, keys.TEMPORARY_SUFFIX}
    for value in vars(keys).values():
        if isinstance(value, str) and value.startswith(f"{keys.JOB_DIR}/"):
            last = value.rstrip(".").rsplit("/", 1)[-1].lstrip(".")
            if last.endswith(".json"):
                names.add(last)
    return names


def test_the_reserved_names_looked_for_include_every_record() -> None:
    assert _reserved_names() >= {
        ".shardpipe",
        ".shardpipe-tmp",
        "job.json",
        "write.json",
        "ome-write.json",
        "precomputed-write.json",
        "migrate.json",
        "intermediate.json",
    }


@pytest.mark.parametrize("name", sorted(_reserved_names()))
def test_no_other_module_spells_a_reserved_name(name: str) -> None:
    spelled = [
        f"{path.relative_to(PACKAGE.parent)}:{number}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != ALLOWED
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if name in line
    ]
    assert not spelled, f"{name!r} is spelled outside shardpipe/storage/keys.py: {spelled}"
