"""The array options, defined once: their types, defaults, documentation and checks.

Every front door that writes a sharded array takes some of the same options:
``to_sharded_zarr`` and ``prepare_write`` all of :class:`WriteOptions`, the
rechunk functions most of them (:mod:`shardpipe.rechunking.options`), the
xarray accessor a few (:mod:`shardpipe.dataset.options`). Here are, once,

* the ``TypedDict`` of each group of options, which the doors take as
  ``**options: Unpack[...]`` (so type checkers check every keyword);
* :data:`ARRAY_PARAMETERS`, each option's numpydoc entry and default (with
  those of the parameters about running: ``progress``, ``compute``,
  ``commit``, ``rebase``), which :func:`~shardpipe.write.parameters.shares_parameters`
  puts into each door's signature and docstring;
* :func:`check_array_options`, the one check of the options that needs
  neither the source nor the target, which every door calls first.
* :data:`DEFAULT_ARRAY_OPTIONS`, every option at its default, checked: a job
  that writes arrays of its own (a pyramid's levels, a dataset's variables)
  sets in a copy of it the values its door checked, and plans them with
  :func:`~shardpipe.write.prepare.prepare_checked` without checking again.

What needs the source (``shards``, ``chunks``, ``fill_value``,
``dimension_names``: :mod:`shardpipe.write.arguments`) or the target
(``path``, ``storage_options``, ``region``, ``append_dim``) is checked where
they are known.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from shardpipe.codec.names import codec_specs
from shardpipe.core.checks import check_bool, check_json_dict
from shardpipe.core.memory import DEFAULT_MAX_MEM
from shardpipe.formats.zarr_sharding import IndexLocation, check_index_location
from shardpipe.write.arguments import check_max_mem, check_strategy
from shardpipe.write.parameters import SharedParameters
from shardpipe.write.resume import Resume, check_resume


class TargetOptions(TypedDict, total=False):
    """Where the array goes, and what becomes of what is there."""

    path: str | None
    overwrite: bool
    storage_options: dict[str, Any] | None
    resume: bool | str


class LayoutOptions(TypedDict, total=False):
    """How a new array is laid out and encoded (a rechunk's target too)."""

    shards: Any
    chunks: Any
    compressors: Any
    filters: Any
    fill_value: Any
    index_location: str | None
    dimension_names: Any
    attributes: dict[str, Any] | None
    chunk_checksums: bool


class WriteOptions(TargetOptions, LayoutOptions, total=False):
    """Every option of :func:`~shardpipe.to_sharded_zarr` and :func:`~shardpipe.prepare_write`."""

    serializer: Any
    write_empty_chunks: bool
    max_mem: int | str
    region: Any
    append_dim: int | str | None
    write_strategy: str


RUN_PARAMETERS = SharedParameters(
    """
    progress : bool
        Show a progress bar over the shards and bytes written (console or
        notebook, on any scheduler); not with ``compute=False``.
    compute : bool
        Write now; with False, return a ``dask.delayed.Delayed`` that writes
        the metadata and then the shards when computed (not into an Icechunk
        session).
    commit : str, optional
        Into an Icechunk session: commit it with this message once every
        shard is written (the Returns section says where the new snapshot's
        id is given). Without it the session holds the changes for you to
        commit.
    rebase : bool
        With ``commit``: if other sessions committed to the branch meanwhile,
        rebase onto their commits when none changed a shard this write
        changed (else :class:`~shardpipe.errors.TransactionConflictError`,
        naming the array and the shards; nothing is committed).
    """,
    {"progress": False, "compute": True, "commit": None, "rebase": False},
)
"""The entries and defaults of the parameters about running a write (every writing door, and
the ``execute`` of every job)."""

ARRAY_PARAMETERS = (
    SharedParameters(
        """
    arr : dask.array.Array or numpy.ndarray
        The data. A NumPy array is wrapped in blocks of one shard.
    store : str, os.PathLike, zarr Store, zarr Group or icechunk.Session
        Where to write: a local path, an fsspec URL (``"s3://bucket/x.zarr"``),
        a zarr ``Store``, a ``Group`` (the array goes at ``path`` in it), or a
        writable Icechunk ``Session`` (or its ``IcechunkStore``): every shard
        is then written by one task through a fork of the session, the forks
        are merged back in a tree, and the session holds the changes (see
        ``commit``). Region writes and appends rewrite whole shards inside
        the transaction.
    path : str, optional
        Path of the array inside the store; the store's root by default.
    shards : tuple of int or "auto", optional
        Shard shape. Default (None or ``"auto"``, as zarr spells it):
        shardpipe's, about 256 MiB of whole inner chunks, near a cube, no
        larger than the array needs.
    chunks : tuple of int or "auto", optional
        Inner chunk shape; must divide ``shards``. Default (None or
        ``"auto"``): shardpipe's, about 1 MiB, near a cube, power-of-two
        sides (dividing ``shards`` if given).
    compressors : codec, name, dict, sequence of them, or "auto"
        Inner-chunk compressors, as in ``zarr.create_array``: codec objects,
        ``{"name": "zstd", "configuration": {"level": 3}}`` dicts, and also
        bare names (``"zstd"``) and dicts without ``configuration`` (the
        codec's defaults); ``"auto"``: zarr's default, zstd.
    filters : codec, name, dict or sequence of them, optional
        Inner-chunk filters (array-to-array codecs), given as ``compressors``.
    serializer : codec, name, dict or "auto"
        Inner-chunk serializer (array-to-bytes codec), given as ``compressors``.
    fill_value : scalar, optional
        Value of elements never written; zarr's default for the dtype if None.
    index_location : {"end", "start"}, optional
        Where each shard's index goes. A new array gets ``"end"``, except on
        Azure Blob Storage (``az://``, ``abfs://``), which serves no suffix
        ranges: there it gets ``"start"``, so that readers (zarr-python on
        adlfs) can fetch the index without knowing the shard's size. An
        explicit ``"end"`` is written as asked.
    dimension_names : sequence of str, optional
        Names of the dimensions, stored in the metadata.
    attributes : dict, optional
        User attributes stored in the metadata (JSON-serialisable).
    overwrite : bool
        Replace an existing array or group at the target. Without it, an
        existing node is an error and nothing is touched.
    storage_options : dict, optional
        fsspec options for URLs; for local paths only ``{"fsync": bool}``
        (default True: shards are made durable before they appear). For an
        S3-compatible server (MinIO, Ceph, moto...) give its address as
        ``endpoint_url``, e.g. ``{"key": "...", "secret": "...",
        "endpoint_url": "http://localhost:9000"}``. An option s3fs does not
        take is refused by name, with the closest one it does.
    write_empty_chunks : bool
        Store inner chunks that equal the fill value everywhere. Default
        False: they are left out of the shard (and wholly empty shards are
        not written at all).
    max_mem : int or str
        Memory budget per task, e.g. ``"2GB"``. Shards that do not fit are
        written in parts by several tasks and stamped by a final one; a plan
        in which some task cannot fit is refused.
    region : tuple of slice, optional
        Write into this box of the existing array at ``path`` (one slice per
        dimension; the box's shape is the source's). Every other byte of the
        array is kept: inner chunks the box covers partly are read, merged
        and re-encoded; untouched ones are never decoded. Layout and codec
        arguments, left out, are the existing array's; given, they must
        match it. A source of another dtype is cast where no value changes:
        safe casts, and integers into other integer types or numbers into a
        narrower float when each value fits (NumPy data checked whole before
        anything is written, Dask blocks as they are computed).
    append_dim : int or str, optional
        Grow the existing array along this axis (a number, or a name of its
        ``dimension_names``) by the source's length and
        write the source at the new end. The new shape is published after
        every shard: readers see the old array until then. Layout and codec
        arguments are as for ``region``.
    write_strategy : {"auto", "in_place", "append", "rewrite"}
        How region writes and appends change existing shards: ``"in_place"``
        overwrites inner chunks where their new encoding fits (file systems),
        ``"append"`` adds new chunks and a new index at the end of the shard
        (file systems; S3 composes the new object server side), ``"rewrite"``
        rebuilds the shard compactly. ``"auto"`` chooses per shard
        (:func:`shardpipe.core.shard_update.choose_strategy`).
    chunk_checksums : bool
        End the inner codec chain of a new array with zarr's ``crc32c``
        codec, so that every reader (zarr-python, tensorstore, zarrs) and
        :func:`~shardpipe.verify` refuse an inner chunk whose bytes changed;
        it costs 4 bytes per chunk. Compressors that already check their
        chunks (a ``crc32c`` among them, or a final ``zstd`` with
        ``checksum=True``) are kept as given: never two checksums. False
        writes the chain exactly as given (or zarr's default). Region writes
        and appends keep the existing array's chain.
    resume : bool or "force"
        Carry on an interrupted write of a new array: shards it published
        (present, index and CRC32C valid) are kept and only the rest are
        written. The array must have been made by the same write, which its
        job record (:data:`~shardpipe.storage.keys.WRITE_RECORD`) shows: same source (its Dask
        name), same metadata. ``"force"`` skips the source comparison (for
        sources whose Dask name is not deterministic). Without an array at
        the target, the write starts afresh. See :mod:`shardpipe.write.resume`.
    """,
        {
            "path": None,
            "shards": None,
            "chunks": None,
            "compressors": "auto",
            "filters": None,
            "serializer": "auto",
            "fill_value": None,
            "index_location": None,
            "dimension_names": None,
            "attributes": None,
            "overwrite": False,
            "storage_options": None,
            "write_empty_chunks": False,
            "max_mem": DEFAULT_MAX_MEM,
            "region": None,
            "append_dim": None,
            "write_strategy": "auto",
            "chunk_checksums": True,
            "resume": False,
        },
    )
    | RUN_PARAMETERS
)
"""The numpydoc entry and default of every array option, and of the parameters about running."""

SOURCE_PARAMETERS = SharedParameters(
    """
    source_storage_options : dict, optional
        fsspec options for the source.
    """,
    {"source_storage_options": None},
)
"""The entry of the option of the doors that read a stored source (rechunks, conversions)."""

STORED_PARAMETERS = ARRAY_PARAMETERS | SharedParameters(
    """
    store : str, os.PathLike, zarr Store or zarr Group
        Where the array (or group) is: a local path, an fsspec URL
        (``"s3://bucket/x.zarr"``), a zarr ``Store`` or a ``Group``.
    path : str, optional
        Path of the array (or group) inside ``store``; the store's root by default.
    workers : int
        Threads working on shards at once when no Dask cluster is active.
    progress : bool
        Show a progress bar over the shards visited (``tqdm.auto``).
    """,
    {"path": None, "workers": 8, "progress": False},
)
"""The entries of the parameters of the doors that look after stored arrays (``info``,
``verify``, ``repair``, ``compact``, ``cleanup``, ``open_array`` ...): where the array is,
how many threads visit its shards."""


@dataclass(frozen=True)
class ArrayOptions:
    """The array options of a call, checked, defaults filled in (:func:`check_array_options`).

    The options checked here hold their checked values (``max_mem`` in
    bytes); the others are as given, to be checked where the source or the
    target is known.
    """

    path: Any
    shards: Any
    chunks: Any
    compressors: Any
    filters: Any
    serializer: Any
    fill_value: Any
    index_location: IndexLocation | None
    dimension_names: Any
    attributes: dict[str, Any] | None
    overwrite: bool
    storage_options: Any
    write_empty_chunks: bool
    max_mem: int
    region: Any
    append_dim: Any
    write_strategy: str
    chunk_checksums: bool
    resume: Resume


def check_array_options(given: Mapping[str, object]) -> ArrayOptions:
    """Check the array options a front door was given; fill in the defaults of the rest.

    Every door that takes array options calls this first, before it opens
    anything: the booleans, ``resume`` (against ``overwrite``),
    ``write_strategy``, ``max_mem``, ``index_location`` and ``attributes``
    are checked here, once for all doors; codec names and short dicts in
    ``compressors``, ``filters`` and ``serializer`` become the dicts zarr
    takes (:func:`~shardpipe.codec.names.codec_specs`), and ``shards`` or
    ``chunks`` of ``"auto"`` (zarr's spelling) become None, shardpipe's
    defaults. Keys that are not array options (a door's own) are ignored.

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        Naming the first option refused, its value and the fix.
    """
    values: dict[str, Any] = {name: given.get(name, default) for name, default in _DEFAULTS.items()}
    overwrite = check_bool("overwrite", values["overwrite"])
    index_location = values["index_location"]
    for name in ("compressors", "filters", "serializer"):
        values[name] = codec_specs(name, values[name])
    for name in ("shards", "chunks"):
        values[name] = auto_as_default(values[name])
    return ArrayOptions(
        **{name: values[name] for name in _AS_GIVEN},
        overwrite=overwrite,
        resume=check_resume(values["resume"], overwrite),
        write_empty_chunks=check_bool("write_empty_chunks", values["write_empty_chunks"]),
        chunk_checksums=check_bool("chunk_checksums", values["chunk_checksums"]),
        write_strategy=check_strategy(values["write_strategy"]),
        max_mem=check_max_mem(values["max_mem"]),
        index_location=None if index_location is None else check_index_location(index_location),
        attributes=check_json_dict("attributes", values["attributes"]),
    )


def auto_as_default(shape: Any) -> Any:
    """``"auto"`` (zarr's spelling of "choose for me") as None, shardpipe's default; else as is."""
    return None if isinstance(shape, str) and shape == "auto" else shape


_DEFAULTS = {name: ARRAY_PARAMETERS.defaults[name] for name in ArrayOptions.__dataclass_fields__}
"""Every array option's default (from :data:`ARRAY_PARAMETERS`)."""

_AS_GIVEN = (
    "path",
    "shards",
    "chunks",
    "compressors",
    "filters",
    "serializer",
    "fill_value",
    "dimension_names",
    "storage_options",
    "region",
    "append_dim",
)
"""Array options checked where the source or the target is known."""

DEFAULT_ARRAY_OPTIONS = check_array_options({})
"""Every array option at its default, checked: the start of the options a job makes for
the arrays it writes itself (a pyramid's levels, a dataset's variables), which
:func:`dataclasses.replace` sets to values its door has checked already."""
