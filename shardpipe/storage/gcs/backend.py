"""The GCS backend of a ``gs://`` or ``gcs://`` location, checked to answer."""

from __future__ import annotations

from typing import Any

from shardpipe.errors import StorageAccessError
from shardpipe.storage.gcs.faults import credentials_fix, one_line
from shardpipe.storage.gcs.store import GcsShardStore

_LOOP_OPTIONS = ("asynchronous", "loop")


def gcs_backend(storage_options: dict[str, Any], root: str) -> GcsShardStore:
    """The GCS backend of ``root`` (``"bucket/prefix"``), checked to answer.

    Its ``gcsfs.GCSFileSystem`` (the plain one: the backend sends JSON API
    requests only, so gcsfs's probe of zonal buckets is not needed) is a
    fresh instance made with ``storage_options`` as gcsfs takes them
    (``token``, ``project``, ``endpoint_url``, ``requester_pays``...), minus
    the event-loop options of the caller's. Missing credentials, a wrong
    endpoint or bucket raise :class:`~shardpipe.errors.StorageAccessError`
    here, before anything is written.

    Parameters
    ----------
    storage_options : dict
        The options of the caller's file system.
    root : str
        The bucket and key prefix.

    Returns
    -------
    GcsShardStore
        The backend.
    """
    import gcsfs.core

    options = {k: v for k, v in storage_options.items() if k not in _LOOP_OPTIONS}
    fs = gcsfs.core.GCSFileSystem(**{**options, "skip_instance_cache": True})
    backend = GcsShardStore(fs, root)
    backend.check_reachable()
    return backend


def credentials_failure(url: str, err: BaseException) -> StorageAccessError:
    """The error for a gcsfs file system of ``url`` that could not be made.

    gcsfs loads (and checks) its credentials when the file system is made: no
    application default credentials, a key file that is not there, a token
    dict without its fields each raise their own exception there, before any
    request. This names the URL, the cause and the fix in one line.

    Parameters
    ----------
    url : str
        The ``gs://`` or ``gcs://`` URL being opened.
    err : BaseException
        What gcsfs (or google-auth) raised.

    Returns
    -------
    shardpipe.errors.StorageAccessError
        To raise ``from err``.
    """
    return StorageAccessError(
        f"GCS credentials for {url} could not be loaded ({one_line(err)}); {credentials_fix()}"
    )
