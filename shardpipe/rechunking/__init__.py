"""Rechunking existing arrays and groups into sharded Zarr v3 arrays.

A source (a Zarr v2 or v3 array, sharded or not, or any Dask array) is read in
blocks aligned to its own chunks and as large as ``max_mem`` allows, and the
blocks go to the ordinary write job; when the blocks that fit are too thin,
the rechunk goes in two passes through an unsharded intermediate.
"""
