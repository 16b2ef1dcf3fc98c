"""Where a Python file reaches into ``zarr.core`` or ``dask._task_spec``, read from its AST.

Shared by the bridge's tests: what the bridge modules import (read without importing
them, so a name a newer release removed is reported by name rather than as an
import error at collection), and every place outside the bridge that imports the
private modules.
"""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

#: The private modules of dependencies that only :mod:`shardpipe.internals` may import.
PRIVATE_MODULES = ("zarr.core", "dask._task_spec")


def package_root() -> Path:
    """The folder of the ``shardpipe`` package, found without importing it."""
    spec = importlib.util.find_spec("shardpipe")
    assert spec is not None and spec.origin is not None, "shardpipe is not installed"
    return Path(spec.origin).parent


def repository_root() -> Path:
    """The folder holding ``shardpipe/``, ``tests/`` and ``requirements/``."""
    return package_root().parent


@dataclass(frozen=True)
class PrivateImport:
    """One reach into a private module: the file, the line and the dotted name used."""

    path: Path
    line: int
    name: str

    def __str__(self) -> str:
        return f"{self.path.relative_to(repository_root())}:{self.line} uses {self.name}"


def is_private(dotted: str) -> bool:
    """Whether ``dotted`` is one of :data:`PRIVATE_MODULES` or inside one."""
    return any(dotted == m or dotted.startswith(m + ".") for m in PRIVATE_MODULES)


def _dotted(node: ast.expr) -> str | None:
    """``a.b.c`` of an attribute chain on a name, else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def private_imports(path: Path) -> Iterator[PrivateImport]:
    """Every import of, or attribute reached through, a private module in ``path``.

    Imports anywhere count: at the top, inside functions, under ``TYPE_CHECKING``;
    so do ``zarr.core.sync.sync`` reached from ``import zarr`` and
    ``importlib.import_module("zarr.core...")``.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    seen: set[int] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Attribute):
            dotted = _dotted(node)
            names = [dotted] if dotted else []
        elif (
            isinstance(node, ast.Call)
            and _dotted(node.func) in ("importlib.import_module", "import_module", "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names = [node.args[0].value]
        private = [n for n in names if is_private(n)]
        if private and node.lineno not in seen:
            seen.add(node.lineno)
            yield PrivateImport(path, node.lineno, private[0])


@dataclass(frozen=True)
class BridgedName:
    """A name a bridge module imports from a private module and re-exports."""

    bridge: str
    module: str
    name: str

    def __str__(self) -> str:
        return f"{self.module}.{self.name}"


def bridged_names(bridge_file: Path) -> list[BridgedName]:
    """What ``bridge_file`` imports from private modules, read from its source."""
    tree = ast.parse(bridge_file.read_text(encoding="utf-8"), filename=str(bridge_file))
    return [
        BridgedName(bridge_file.stem, node.module, alias.name)
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module and is_private(node.module)
        for alias in node.names
    ]
