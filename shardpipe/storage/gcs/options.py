"""Check the names of ``storage_options`` for GCS before anything is opened or written.

gcsfs takes ``**kwargs`` and hands what it does not know to fsspec, which
drops it silently: ``storage_options={"endpoint": "http://..."}`` (for
``endpoint_url``) would send the write to Google rather than the server
meant, and ``{"tokne": ...}`` would write anonymously. :func:`check_gcs_options`
refuses an unknown name up front, naming the parameter, the option, its
value and the closest valid option. The valid ones are the parameters of
``gcsfs.GCSFileSystem`` (read from its signature, so a newer gcsfs's options
are accepted) and those every fsspec file system takes (:data:`FSSPEC_OPTIONS`).
"""

from __future__ import annotations

import difflib
import functools
import inspect
from typing import Any

from shardpipe.errors import InvalidArgumentError

GCS_SCHEMES = ("gs://", "gcs://")
"""URL schemes of Google Cloud Storage (both are gcsfs's)."""

FSSPEC_OPTIONS = frozenset(
    (
        "skip_instance_cache",
        "use_listings_cache",
        "listings_expiry_time",
        "max_paths",
        "asynchronous",
        "loop",
        "batch_size",
    )
)
"""Options every fsspec file system takes (its instance and listings caches, its event loop)."""


@functools.cache
def gcsfs_options() -> frozenset[str]:
    """The names ``gcsfs.GCSFileSystem`` takes, and fsspec's common ones."""
    import gcsfs.core  # only for GCS URLs

    parameters = inspect.signature(gcsfs.core.GCSFileSystem.__init__).parameters.values()
    named = {p.name for p in parameters if p.kind is p.POSITIONAL_OR_KEYWORD}
    return frozenset(named - {"self"}) | FSSPEC_OPTIONS


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
    if not options:
        return options
    valid = gcsfs_options()
    for key, value in options.items():
        if key not in valid:
            problem = f"{key!r} (given {value!r}) is not an option of gcsfs.GCSFileSystem"
            closest = difflib.get_close_matches(key, sorted(valid), n=1, cutoff=0.6)
            listed = ", ".join(sorted(valid - FSSPEC_OPTIONS))
            hint = f"Did you mean {closest[0]!r}? " if closest else ""
            raise InvalidArgumentError(parameter, problem, f"{hint}The options are {listed}")
    return options
