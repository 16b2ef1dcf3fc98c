"""Benchmarks of shardpipe against other Zarr v3 writers, on S3, beyond max_mem, on clusters.

Run them with ``python -m benchmarks [large-shard | s3 | cluster]`` from the
repository root; ``benchmarks/README.md`` says what each case measures and how.
"""
