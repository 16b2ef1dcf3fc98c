"""Storage backends: local file systems, S3, Icechunk and any zarr store.

Every backend implements :class:`~shardpipe.storage.base.ShardStore` and
declares what it can do (parts, conditional publishes, writes at an offset,
appends, server-side copies) in its ``StoreAbilities``; every call goes
through the retry layer, and every key is checked at this edge.
"""
