"""Azure Blob Storage backend: ``az://`` and ``abfs://`` targets.

See :mod:`shardpipe.storage.azure.store`.
"""
