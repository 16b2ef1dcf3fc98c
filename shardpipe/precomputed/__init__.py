"""Writing and checking Neuroglancer precomputed volumes in the sharded format.

A pyramid of scales from one Dask graph, one task per shard file (or parts of
one), sharding sized to the memory of a task; the checks behind ``verify`` and
``info`` for volumes whoever wrote them.
"""
