"""Check the names of ``storage_options`` for GCS before anything is opened or written.

gcsfs takes ``**kwargs`` and hands what it does not know to fsspec, which
drops it silently: ``storage_options={"endpoint": "http://..."}`` (for
``endpoint_url``) would send the write to Google rather than the server
meant, and ``{"tokne": ...}`` would write anonymously. :func:`check_gcs_options`
refuses an unknown name up front, naming the parameter, the option, its
value and the closest valid option. The valid ones are the parameters of
``gcsfs.GCSFileSystem`` (read from its signature, so a newer gcsfs's options
are accepted) and those every fsspec file system takes
(:data:`~shardpipe.storage.option_checks.FSSPEC_OPTIONS`).
"""

from __future__ import annotations

import functools
from typing import Any

from shardpipe.storage.option_checks import filesystem_options, unknown_option

GCS_SCHEMES = ("gs://", "gcs://")
"""URL schemes of Google Cloud Storage (both are gcsfs's)."""


@functools.cache
def gcsfs_options() -> frozenset[str]:
    """The names ``gcsfs.GCSFileSystem`` takes, and fsspec's common ones."""
    import gcsfs.core  # only for GCS URLs

    return filesystem_options(gcsfs.core.GCSFileSystem)


def check_gcs_options(parameter: str, options: dict[str, Any] | None) -> dict[str, Any] | None:
    """Return ``options`` for a ``gs://`` or ``gcs://`` URL, every name checked.

    Parameters
    ----------
    parameter : str
        The parameter that gave them (``"storage_options"``...).
    options : dict or None
        The options.

    Returns
    -------
    dict or None
        ``options`` unchanged.

    Raises
    ------
    InvalidArgumentError
        If a name is not an option of gcsfs (the message names the closest
        valid one).

    Examples
    --------
    >>> check_gcs_options("storage_options", {"token": "anon"})
    {'token': 'anon'}
    """
    for key in options or {}:
        if key not in gcsfs_options():
            raise unknown_option(parameter, key, gcsfs_options(), "gcsfs.GCSFileSystem")
    return options
