"""The names shardpipe takes from Dask's private ``dask._task_spec`` module.

shardpipe builds its graphs from Dask's task objects directly (a ``Task`` per
shard write, ``TaskRef`` to a source block, ``Alias`` and ``DataNode`` for keys
that stand for others or hold a value), which costs no ``dask.delayed`` call
per task. Dask keeps them in ``dask._task_spec``, which it may change in any
release; this module is the only one in shardpipe that imports it. Checked
against the Dask version in :data:`CHECKED_WITH` (the one pinned in
``requirements/constraints.txt``); ``tests/internals/test_bridge.py`` names any
name a newer Dask no longer has.
"""

from __future__ import annotations

from dask._task_spec import Alias, DataNode, GraphNode, Task, TaskRef, convert_legacy_graph

__all__ = ["Alias", "DataNode", "GraphNode", "Task", "TaskRef", "convert_legacy_graph"]

#: The Dask release every name above was checked against.
CHECKED_WITH = "2026.8.0"
