"""Benchmarks of shardpipe against other sharded Zarr v3 writers, on S3, and beyond max_mem.

Run them with ``python -m benchmarks [large-shard | s3]`` from the repository
root; ``benchmarks/README.md`` says what each case measures and how.
"""
