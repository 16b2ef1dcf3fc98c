"""The pure core: geometry, plans and the memory model; no I/O, no Dask, no zarr.

Shard and chunk grids, regions, write plans and their totals by classes of
shards that plan alike, parts and waves, the memory model checked against
``max_mem``, default sizes, Morton codes and downsampling. Tuples and NumPy
in, tuples and bytes out.
"""
