"""OME-Zarr 0.5: sharded multiscale images and labels written from Dask in one pass."""
