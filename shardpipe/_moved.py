"""Old import paths of modules that moved into packages (0.2), kept for one release.

``import shardpipe.writer`` (or ``from shardpipe.job import ShardedWrite``)
still works, with a :class:`DeprecationWarning` naming the new path: the
old name is a thin module whose attributes are those of the new one.
Names that now mean something else are not kept: ``shardpipe.verify``,
``shardpipe.migrate``, ``shardpipe.rechunk`` and ``shardpipe.rechunk_group``
are the functions, and ``shardpipe.journal`` and ``shardpipe.maintenance``
are packages (the CHANGELOG lists where their contents went).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType
from typing import Any

MOVED = {
    "array_lock": "journal.array_lock",
    "bounded_decode": "codec.bounded",
    "canvas": "codec.canvas",
    "checks": "core.checks",
    "cli_errors": "cli.exit_statuses",
    "completeness": "journal.leftovers",
    "creation": "write.resume write.modes",
    "demo": "cli.demo",
    "encoding": "codec.chunk_codec",
    "execute": "write.run",
    "existing": "write.arguments stored.metadata",
    "fusion": "engine.fusion",
    "graph": "engine.graph",
    "groups": "maintenance.groups",
    "heap": "engine.heap",
    "icechunk_cli": "cli.icechunk_sessions",
    "job": "write.job",
    "job_summary": "write.spec",
    "journal_stalls": "journal.stalls",
    "legacy_hierarchy": "legacy.hierarchy",
    "legacy_metadata": "legacy.metadata",
    "locations": "stored.locations",
    "metadata": "stored.metadata",
    "migrate_cli": "cli.commands.migrate",
    "migrate_copy": "legacy.copy",
    "migrate_marker": "legacy.marker",
    "migrate_plan": "legacy.plan",
    "plain_chain": "codec.plain_chain",
    "precomputed_cli": "cli.commands.write_precomputed",
    "precomputed_graph": "precomputed.graph",
    "precomputed_tasks": "precomputed.tasks",
    "precomputed_verify": "precomputed.check",
    "precomputed_write": "precomputed.api",
    "prepare": "write.prepare",
    "progress": "engine.progress",
    "read_gates": "engine.read_gates",
    "rechunk_cli": "cli.commands.rechunk",
    "rechunk_intermediate": "rechunking.intermediate",
    "rechunk_memory": "rechunking.memory",
    "rechunk_source": "rechunking.source",
    "reports": "engine.reports",
    "resume": "write.resume",
    "shard_check": "stored.shard_integrity",
    "shard_listing": "stored.listing",
    "source_window": "engine.source_window",
    "started_job": "write.run",
    "store_checks": "stored.places",
    "streaming": "engine.streaming",
    "summary": "core.display",
    "task_groups": "engine.task_groups",
    "tasks": "engine.tasks",
    "transaction": "write.arguments write.api",
    "updating": "engine.update_tasks",
    "validate": "write.arguments",
    "writer": "write.api",
    "zlib_rewrap": "codec.zlib_rewrap",
    "zstd_frames": "codec.zstd_frames",
}
"""Old module name (under ``shardpipe.``) -> its new one (or new ones, where its contents
went to several: a name is looked up in each in turn)."""


class _Alias(importlib.abc.Loader):
    """Makes the old module: a module whose attributes are looked up in the new one."""

    def __init__(self, new: str) -> None:
        self.new = new

    def exec_module(self, module: ModuleType) -> None:
        targets = [importlib.import_module(new) for new in self.new.split()]

        def __getattr__(name: str) -> Any:
            for target in targets[:-1]:
                if hasattr(target, name):
                    return getattr(target, name)
            return getattr(targets[-1], name)

        module.__getattr__ = __getattr__  # type: ignore[method-assign]
        moved_to = " and ".join(f":mod:`{new}`" for new in self.new.split())
        module.__doc__ = f"Moved to {moved_to} (this name goes in the next release)."


class _MovedFinder(importlib.abc.MetaPathFinder):
    """Finds the old names of :data:`MOVED`, warning once per import."""

    def find_spec(
        self, fullname: str, path: Any = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        package, _, name = fullname.partition(".")
        if package != "shardpipe" or name not in MOVED:
            return None
        new = " ".join(f"shardpipe.{moved}" for moved in MOVED[name].split())
        warnings.warn(
            f"{fullname} moved to {' and '.join(new.split())}; the old name goes in the next "
            "release",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.machinery.ModuleSpec(fullname, _Alias(new))


def install() -> None:
    """Let the old names be imported (called once, by ``import shardpipe``)."""
    if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _MovedFinder())
