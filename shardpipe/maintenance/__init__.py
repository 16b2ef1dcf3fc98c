"""Looking after stored arrays: ``verify``, ``info``, ``repair``, ``compact``.

Each takes a store and dispatches once over the kinds of target it may hold
(a sharded Zarr v3 array, a group of them, a hierarchy of the sharding draft,
a Neuroglancer precomputed volume; :mod:`shardpipe.maintenance.targets`), and
looks only at the shards present, never at the whole shard grid.
"""
