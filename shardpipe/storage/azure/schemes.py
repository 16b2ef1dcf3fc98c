"""Azure URLs and the ``storage_options`` names adlfs takes (the Azure SDK is not imported).

adlfs passes names it does not know on to fsspec, which ignores them: a
misspelt ``conection_string`` would silently fall back to anonymous
access. :func:`check_azure_options` refuses an unknown name before anything
is opened, naming the closest valid one
(:mod:`~shardpipe.storage.option_names` calls it for Azure URLs).
"""

from __future__ import annotations

import functools
from typing import Any

from shardpipe.storage.option_checks import filesystem_options, unknown_option

AZURE_SCHEMES = ("az://", "abfs://", "abfss://")
"""The URL schemes adlfs serves (``adlfs.AzureBlobFileSystem.protocol``)."""


@functools.cache
def adlfs_options() -> frozenset[str]:
    """The names ``adlfs.AzureBlobFileSystem`` takes, and fsspec's common ones."""
    import adlfs  # only for Azure URLs

    return filesystem_options(adlfs.AzureBlobFileSystem)


def check_azure_options(parameter: str, options: dict[str, Any] | None) -> dict[str, Any] | None:
    """Return ``options`` for an Azure URL unchanged; refuse a name adlfs does not take.

    Parameters
    ----------
    parameter : str
        The parameter that gave them (``"storage_options"``).
    options : dict or None
        The options.

    Returns
    -------
    dict or None
        ``options``.

    Raises
    ------
    InvalidArgumentError
        If a name is not an option of ``adlfs.AzureBlobFileSystem``; the
        message names the closest valid one.
    """
    for key in options or {}:
        if key not in adlfs_options():
            raise unknown_option(parameter, key, adlfs_options(), "adlfs.AzureBlobFileSystem")
    return options
