"""Only :mod:`shardpipe.internals` reaches into ``zarr.core`` and ``dask._task_spec``.

import-linter cannot say it (its forbidden contracts name whole external packages,
never a submodule such as ``zarr.core``), so this test reads every module of the
package, and of the test suite, and names each file and line that does.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.internals.private_imports import (
    PRIVATE_MODULES,
    package_root,
    private_imports,
    repository_root,
)

BRIDGE = package_root() / "internals"
HERE = Path(__file__).parent


def _python_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.py") if p.parent != BRIDGE and p.parent != HERE)


@pytest.mark.parametrize("folder", ["shardpipe", "tests"])
def test_no_module_outside_the_bridge_imports_dependency_internals(folder: str) -> None:
    files = _python_files(repository_root() / folder)
    assert len(files) > 20
    found = [str(reach) for path in files for reach in private_imports(path)]
    assert not found, (
        f"only shardpipe.internals may use {' or '.join(PRIVATE_MODULES)}; import these names "
        "from shardpipe.internals.zarr_core or shardpipe.internals.dask_task_spec (add a name "
        "there if it is missing):\n" + "\n".join(found)
    )
