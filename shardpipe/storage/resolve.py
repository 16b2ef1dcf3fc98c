"""Turn what the caller passed as ``store`` into a zarr store and a shard backend.

Accepted: a local path (``str`` or ``os.PathLike``; zarr reads and writes
it through :class:`~shardpipe.storage.local.contained.ContainedLocalStore`, which
keeps every key inside it), an fsspec URL such as
``"s3://bucket/volume.zarr"`` (with ``storage_options``), a zarr ``Store``,
a zarr ``Group`` (the array goes at ``path`` inside the group), a writable
Icechunk ``Session`` or its ``IcechunkStore`` (:mod:`shardpipe.storage.icechunk.store`),
or a :class:`ResolvedStore` already made (``path`` is then inside its path).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any

import zarr
from zarr.abc.store import Store
from zarr.storage import FsspecStore, LocalStore

from shardpipe.core.checks import check_path
from shardpipe.errors import InvalidArgumentError
from shardpipe.storage.azure.backend import azure_backend
from shardpipe.storage.base import ShardStore
from shardpipe.storage.gcs.backend import credentials_failure, gcs_backend
from shardpipe.storage.gcs.options import GCS_SCHEMES
from shardpipe.storage.icechunk.store import icechunk_backend, is_icechunk
from shardpipe.storage.local.contained import ContainedLocalStore
from shardpipe.storage.local.store import LocalShardStore
from shardpipe.storage.loopless_finalizers import close_on_their_loops
from shardpipe.storage.option_names import check_storage_options
from shardpipe.storage.retry import DEFAULT_POLICY, RetryingStore, RetryPolicy
from shardpipe.storage.urls import check_location
from shardpipe.storage.zarr_errors import with_storage_errors
from shardpipe.storage.zarr_store import ZarrShardStore


@dataclass(frozen=True)
class ResolvedStore:
    """A write location as zarr sees it and as shardpipe writes it.

    Parameters
    ----------
    zarr_store : zarr.abc.store.Store
        Used for metadata and for reading back.
    shards : ShardStore
        Used by tasks to publish shards.
    path : str
        The array's path inside the store (``""`` for the root).
    scheme : str, optional
        The URL scheme the caller wrote, where its file system answers to several
        (``"az"`` for ``az://``, which adlfs calls ``abfs``): messages name places in
        the store with it. None for a local path or a store passed as an object.
    """

    zarr_store: Store
    shards: ShardStore
    path: str
    scheme: str | None = None

    @property
    def zarr_store_for_writes(self) -> Store:
        """``zarr_store`` for writes through zarr: a full disk raises ``StorageFullError``.

        See :mod:`shardpipe.storage.zarr_errors`.
        """
        return with_storage_errors(self.zarr_store)

    @property
    def transactional(self) -> bool:
        """Whether writes are staged in a transaction the user commits (Icechunk)."""
        return self.shards.abilities.transactional

    def key(self, relative: str) -> str:
        """Return the store key of ``relative`` inside the array."""
        return f"{self.path}/{relative}" if self.path else relative


def _join(*parts: str | None) -> str:
    return "/".join(p.strip("/") for p in parts if p and p.strip("/"))


def _written_scheme(url: str, store: FsspecStore) -> str | None:
    """The scheme of ``url`` if it is one of the names of ``store``'s file system (not of
    a chained URL such as ``simplecache::s3://...``, whose store is the outer one)."""
    scheme = url.split("://", 1)[0].lower()
    return scheme if "::" not in url and scheme in fs_protocols(store) else None


def _s3_backend(storage_options: dict[str, Any], root: str) -> ShardStore:
    """The S3 backend of ``root``, checked to answer (see :mod:`shardpipe.storage.s3.store`).

    Its file system gets shardpipe's timeouts and retry counts unless
    ``config_kwargs`` in ``storage_options`` say otherwise, and is shared by
    the writes of this process with the same options
    (:func:`~shardpipe.storage.s3.config.s3_file_system`). Missing
    credentials, a wrong endpoint or bucket raise
    :class:`~shardpipe.errors.StorageAccessError` here, before anything is
    written.
    """
    from shardpipe.storage.s3.config import S3FS_RETRIES, s3_file_system
    from shardpipe.storage.s3.store import S3ShardStore

    backend = S3ShardStore(s3_file_system(storage_options), root, fs_retries=S3FS_RETRIES)
    backend.check_reachable()
    return backend


def retry_policy() -> RetryPolicy:
    """The retry policy of new writes, from Dask's config (``shardpipe.retry.*``).

    ``attempts`` (tries in all), ``first-delay`` and ``max-delay`` (seconds);
    for example ``dask.config.set({"shardpipe.retry.attempts": 10})``.
    """
    import dask.config

    return RetryPolicy(
        attempts=dask.config.get("shardpipe.retry.attempts", DEFAULT_POLICY.attempts),
        first_delay=dask.config.get("shardpipe.retry.first-delay", DEFAULT_POLICY.first_delay),
        max_delay=dask.config.get("shardpipe.retry.max-delay", DEFAULT_POLICY.max_delay),
    )


def fs_protocols(store: Any) -> frozenset[str]:
    """The names of the protocol of a zarr store's fsspec file system (none without one)."""
    protocol = getattr(getattr(store, "fs", None), "protocol", ())
    return frozenset((protocol,) if isinstance(protocol, str) else protocol)


def _backend_for(store: Store, local_options: dict[str, Any]) -> ShardStore:
    return RetryingStore(_bare_backend_for(store, local_options), retry_policy())


def _bare_backend_for(store: Store, local_options: dict[str, Any]) -> ShardStore:
    if isinstance(store, LocalStore):
        return LocalShardStore(store.root, **local_options)
    if isinstance(store, FsspecStore):
        protocols = fs_protocols(store)
        if "s3" in protocols or "s3a" in protocols:
            return _s3_backend(dict(store.fs.storage_options), store.path)
        if "gs" in protocols or "gcs" in protocols:
            return gcs_backend(dict(store.fs.storage_options), store.path)
        if {"az", "abfs", "abfss"} & protocols:  # adlfs
            return azure_backend(dict(store.fs.storage_options), store.path)
        if "file" in protocols or "local" in protocols:
            return LocalShardStore(store.path, **local_options)
    return ZarrShardStore(store)


def resolve_store(
    store: Any, path: str | None = None, storage_options: dict[str, Any] | None = None
) -> ResolvedStore:
    """Resolve ``store`` (and ``path`` inside it) into a :class:`ResolvedStore`.

    ``storage_options`` go to fsspec for URLs; for local paths the one option
    is ``fsync`` (default True: every shard is made durable before it is
    published).

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        If ``store`` is none of the accepted kinds, text that only looks
        like a URL (:func:`~shardpipe.storage.urls.check_location`), or
        ``storage_options`` are not a dict of options that apply to it.
    """
    check_path("path", path)
    if storage_options is not None and not isinstance(storage_options, dict):
        raise InvalidArgumentError(
            "storage_options",
            f"expected a dict, got {type(storage_options).__name__}",
            'Pass a dict such as {"anon": False} or {"fsync": False}',
        )
    options = dict(storage_options or {})
    fsync = options.pop("fsync", True)
    if not isinstance(fsync, bool):
        raise InvalidArgumentError(
            "storage_options",
            f"'fsync' must be True or False, got {fsync!r}",
            'Pass {"fsync": False} to skip fsync, or leave it out',
        )
    local_options = {"fsync": fsync}
    if isinstance(store, ResolvedStore):
        return replace(store, path=_join(store.path, path))
    if is_icechunk(store):  # Icechunk retries its own storage calls
        if options or not fsync:
            raise InvalidArgumentError(
                "storage_options",
                f"{storage_options} do not apply to an Icechunk session",
                "Configure storage on the Icechunk repository instead, and leave them out",
            )
        zarr_store, backend = icechunk_backend(store)
        return ResolvedStore(zarr_store, backend, _join(path))
    if isinstance(store, zarr.Group):
        inner = store.store
        if is_icechunk(inner):
            zarr_store, backend = icechunk_backend(inner)
            return ResolvedStore(zarr_store, backend, _join(store.path, path))
        return ResolvedStore(inner, _backend_for(inner, local_options), _join(store.path, path))
    if isinstance(store, Store):
        return ResolvedStore(store, _backend_for(store, local_options), _join(path))
    if isinstance(store, str | os.PathLike):
        text = check_location("store", store)
        if "://" in text and not text.startswith("file://"):
            options = check_storage_options("storage_options", text, options) or {}
            close_on_their_loops(text)  # gcsfs's and adlfs's finalizers: tracebacks at exit
            try:
                fs_store = FsspecStore.from_url(text, storage_options=options, read_only=False)
            except (TypeError, ValueError, ImportError) as err:
                raise InvalidArgumentError(
                    "store",
                    f"cannot open {text!r} with fsspec ({err})",
                    "Check the URL's scheme and the storage_options for its file system",
                ) from err
            except Exception as err:  # gcsfs loads its credentials when it is made
                if not text.startswith(GCS_SCHEMES):
                    raise
                raise credentials_failure(text, err) from err
            return ResolvedStore(
                fs_store,
                _backend_for(fs_store, local_options),
                _join(path),
                _written_scheme(text, fs_store),
            )
        if options:
            raise InvalidArgumentError(
                "storage_options",
                f"{sorted(options)} do not apply to the local path {text!r}",
                "The only option for local paths is 'fsync'",
            )
        local = os.path.abspath(text.removeprefix("file://"))
        return ResolvedStore(
            ContainedLocalStore(local, read_only=False),
            RetryingStore(LocalShardStore(local, **local_options), retry_policy()),
            _join(path),
        )
    raise InvalidArgumentError(
        "store",
        f"expected a local path, an fsspec URL, a zarr Store, a zarr Group or an Icechunk "
        f"Session, got "
        f"{type(store).__name__}",
        "Pass e.g. '/data/volume.zarr' or 's3://bucket/volume.zarr'",
    )
