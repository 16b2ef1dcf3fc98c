"""The Google Cloud Storage backend: ``gs://`` and ``gcs://`` locations.

:mod:`~shardpipe.storage.gcs.store` (the ``ShardStore``),
:mod:`~shardpipe.storage.gcs.parts` (part objects joined by ``compose``),
:mod:`~shardpipe.storage.gcs.objects` (requests about objects, tried and named),
:mod:`~shardpipe.storage.gcs.requests` (one JSON API request on gcsfs's session),
:mod:`~shardpipe.storage.gcs.faults` (what a failure means),
:mod:`~shardpipe.storage.gcs.config` (timeouts and tries),
:mod:`~shardpipe.storage.gcs.options` (``storage_options`` names checked) and
:mod:`~shardpipe.storage.gcs.backend` (the backend of a location, checked to answer).
"""
