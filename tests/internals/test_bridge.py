"""The bridge to dependency internals: every name it re-exports still exists, and it
records the zarr and Dask versions it was checked against."""

from __future__ import annotations

import importlib
import importlib.metadata
import re
from pathlib import Path

import pytest

from tests.internals.private_imports import (
    BridgedName,
    bridged_names,
    package_root,
    private_imports,
    repository_root,
)

BRIDGE = package_root() / "internals"
#: bridge module -> the distribution whose private module it re-exports
DISTRIBUTIONS = {"zarr_core": "zarr", "dask_task_spec": "dask"}
BRIDGED = [n for stem in DISTRIBUTIONS for n in bridged_names(BRIDGE / f"{stem}.py")]


def _checked_with(bridge: str) -> str:
    """``CHECKED_WITH`` of a bridge module, read from its source (no import)."""
    found = re.search(r'^CHECKED_WITH = "([^"]+)"$', (BRIDGE / f"{bridge}.py").read_text(), re.M)
    assert found, f'shardpipe/internals/{bridge}.py must record CHECKED_WITH = "<version>"'
    return found.group(1)


def test_the_bridge_reexports_names_of_both_dependencies() -> None:
    assert {n.bridge for n in BRIDGED} == set(DISTRIBUTIONS)
    assert len(BRIDGED) >= 10


@pytest.mark.parametrize("bridged", BRIDGED, ids=str)
def test_every_bridged_name_exists_in_the_installed_release(bridged: BridgedName) -> None:
    dist = DISTRIBUTIONS[bridged.bridge]
    installed = importlib.metadata.version(dist)
    checked = _checked_with(bridged.bridge)
    gone = (
        f"{bridged} (re-exported by shardpipe.internals.{bridged.bridge}) is gone in {dist} "
        f"{installed}; the bridge was checked against {dist} {checked}. Find where {dist} "
        f"{installed} keeps it and import it from there in shardpipe/internals/"
        f"{bridged.bridge}.py (only that file changes), then set CHECKED_WITH = {installed!r}"
    )
    try:
        module = importlib.import_module(bridged.module)
    except ImportError as err:
        pytest.fail(f"{gone} (module {bridged.module} cannot be imported: {err})")
    assert hasattr(module, bridged.name), gone


@pytest.mark.parametrize("bridge", sorted(DISTRIBUTIONS))
def test_a_bridge_module_exports_exactly_what_it_imports(bridge: str) -> None:
    module = importlib.import_module(f"shardpipe.internals.{bridge}")
    imported = sorted(n.name for n in BRIDGED if n.bridge == bridge)
    assert sorted(module.__all__) == imported
    for bridged in (n for n in BRIDGED if n.bridge == bridge):
        assert getattr(module, bridged.name) is getattr(
            importlib.import_module(bridged.module), bridged.name
        )


@pytest.mark.parametrize("bridge", sorted(DISTRIBUTIONS))
def test_the_checked_version_is_the_pinned_one(bridge: str) -> None:
    """A new pin of zarr or Dask in the lock is a new check of the bridge."""
    dist = DISTRIBUTIONS[bridge]
    constraints = (repository_root() / "requirements" / "constraints.txt").read_text()
    pinned = re.search(rf"^{dist}==(\S+)$", constraints, re.M)
    assert pinned, f"requirements/constraints.txt pins no {dist}=="
    assert pinned.group(1) == _checked_with(bridge), (
        f"requirements/constraints.txt pins {dist}=={pinned.group(1)} but "
        f"shardpipe/internals/{bridge}.py was checked against {dist} {_checked_with(bridge)}: "
        f"run `pytest tests/internals` with {dist} {pinned.group(1)} installed, then set "
        f"CHECKED_WITH = {pinned.group(1)!r} there"
    )


def test_every_bridged_name_is_used_by_shardpipe() -> None:
    """The bridge holds what shardpipe needs, no more."""
    used: set[tuple[str, str]] = set()
    for path in package_root().rglob("*.py"):
        if path.parent == BRIDGE:
            continue
        source = path.read_text(encoding="utf-8")
        for bridge in DISTRIBUTIONS:
            for block in re.findall(
                rf"from shardpipe\.internals\.{bridge} import (\([^)]*\)|[^\n]*)", source
            ):
                names = re.findall(r"\w+", block)
                used.update((bridge, name) for name in names)
    unused = [str(n) for n in BRIDGED if (n.bridge, n.name) not in used]
    assert not unused, f"shardpipe.internals re-exports names nothing in shardpipe uses: {unused}"


def test_the_private_import_finder_sees_every_form(tmp_path: Path) -> None:
    source = tmp_path / "reach.py"
    source.write_text(
        "import zarr\n"
        "from zarr.core.buffer import Buffer\n"
        "def f():\n"
        "    import dask._task_spec\n"
        "    return zarr.core.sync.sync\n"
        "from zarr import core\n"
        "from zarr.codecs import BytesCodec\n"
        'import importlib; importlib.import_module("zarr.core.array")\n'
        '"""zarr.core in a docstring is no import"""\n'
    )
    found = {(f.line, f.name) for f in private_imports(source)}
    assert found == {
        (2, "zarr.core.buffer"),
        (4, "dask._task_spec"),
        (5, "zarr.core.sync.sync"),
        (6, "zarr.core"),
        (8, "zarr.core.array"),
    }
