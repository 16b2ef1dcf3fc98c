"""Azure Blob Storage backend: ``az://`` and ``abfs://`` targets (see :mod:`.store`)."""
