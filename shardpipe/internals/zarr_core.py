"""The names shardpipe takes from zarr-python's private ``zarr.core`` package.

zarr-python 3 keeps these in ``zarr.core``, which it may change in any release;
this module is the only one in shardpipe that imports it. Checked against the
zarr version in :data:`CHECKED_WITH` (the one pinned in
``requirements/constraints.txt``); ``tests/internals/test_bridge.py`` imports every
name below from its zarr module and names any that a newer zarr no longer has.
"""

from __future__ import annotations

from zarr.core.array import AsyncArray
from zarr.core.array_spec import ArrayConfig, ArraySpec
from zarr.core.buffer import Buffer, BufferPrototype, NDBuffer, default_buffer_prototype
from zarr.core.group import ConsolidatedMetadata, GroupMetadata
from zarr.core.indexing import SelectorTuple
from zarr.core.metadata.v2 import ArrayV2Metadata
from zarr.core.metadata.v3 import ArrayV3Metadata
from zarr.core.sync import loop, sync

__all__ = [
    "ArrayConfig",
    "ArraySpec",
    "ArrayV2Metadata",
    "ArrayV3Metadata",
    "AsyncArray",
    "Buffer",
    "BufferPrototype",
    "ConsolidatedMetadata",
    "GroupMetadata",
    "NDBuffer",
    "SelectorTuple",
    "default_buffer_prototype",
    "loop",
    "sync",
]

#: The zarr-python release every name above was checked against.
CHECKED_WITH = "3.4.2"
