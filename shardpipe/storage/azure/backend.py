"""The Azure backend of an adlfs target, made from its options and checked to answer.

What :mod:`shardpipe.storage.resolve` calls for ``az://``, ``abfs://`` and
``abfss://`` targets; the Azure SDK is imported only when one is used.
"""

from __future__ import annotations

from typing import Any

from shardpipe.storage.base import ShardStore


def azure_backend(storage_options: dict[str, Any], root: str) -> ShardStore:
    """The Azure backend of ``root`` (``"container/prefix"``), checked to answer.

    Parameters
    ----------
    storage_options : dict
        adlfs's options (the file system's ``storage_options``).
    root : str
        The container and the prefix in it.

    Returns
    -------
    ShardStore
        An :class:`~shardpipe.storage.azure.store.AzureShardStore`.

    Raises
    ------
    shardpipe.errors.StorageAccessError
        Missing or rejected credentials, a missing container, an endpoint
        that cannot be reached: before anything is written.
    """
    from shardpipe.storage.azure.store import AzureShardStore

    backend = AzureShardStore(storage_options, root)
    backend.check_reachable()
    return backend
