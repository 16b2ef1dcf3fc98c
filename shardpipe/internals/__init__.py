"""The one bridge to the private internals of shardpipe's dependencies.

shardpipe needs a few names that zarr-python and Dask keep in private modules
(``zarr.core`` and ``dask._task_spec``): buffers and array specs to run zarr's
codecs synchronously, array metadata values, and Dask's task objects to build
graphs without a ``dask.delayed`` call per task. Every module of shardpipe takes
them from here, so a release of zarr or Dask that moves one of them breaks this
package only, and ``tests/internals`` says which name is gone and which versions
the bridge was checked against.

- :mod:`shardpipe.internals.zarr_core`: the names taken from ``zarr.core``;
- :mod:`shardpipe.internals.dask_task_spec`: the names taken from ``dask._task_spec``.

Nothing else in shardpipe imports ``zarr.core`` or ``dask._task_spec`` (a test over
the package's imports checks it).
"""
