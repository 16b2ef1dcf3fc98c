"""Benchmark harness comparing shardpipe with other sharded Zarr v3 writers.

Run it with ``python -m benchmarks`` from the repository root; see
``benchmarks/README.md`` for what each writer and anchor measures.
"""
