"""Tell a local path from a URL, and refuse text that is neither for sure.

Every front door that takes a store, a source or a target as text passes it
through :func:`check_location` before anything is opened. A string such as
``"s3:/bucket/x"`` (one slash) is no URL to fsspec or zarr: taken as a local
path it would create a folder ``s3:`` in the working directory and write
there, silently. So text that starts like a URL scheme (letters, then ``:``)
must go on with ``//`` and name a protocol fsspec knows; a local folder whose
name holds a colon is written ``./name:x`` or as an absolute path.
``pathlib.Path("s3://bucket/x")`` collapses to ``s3:/bucket/x`` and is
refused the same way.
"""

from __future__ import annotations

import os
import re
from typing import Any

import fsspec

from shardpipe.errors import InvalidArgumentError

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")
"""A URL scheme as RFC 3986 spells it, with its colon."""


def known_protocol(scheme: str) -> bool:
    """Whether fsspec has (or knows where to import) a file system for ``scheme``."""
    return scheme.lower() in fsspec.available_protocols()


def check_location(name: str, value: Any) -> str:
    """Return the text of a local path or URL; refuse one that only looks like a URL.

    Parameters
    ----------
    name : str
        The parameter, as the message names it (``"store"``, ``"source"``, ...).
    value : str or os.PathLike
        What was passed.

    Returns
    -------
    str
        ``os.fspath(value)``, unchanged.

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        If the text starts with a scheme (two letters or more, then ``:``)
        not followed by ``//``, or names a protocol fsspec does not know
        (also in a chained URL such as ``simplecache::s3://...``).
    """
    text = os.fspath(value)
    if not isinstance(text, str):
        raise InvalidArgumentError(
            name, f"expected a local path or URL as text, got bytes {text!r}", "Pass a str"
        )
    *outer, last = text.split("::")
    for part in outer:  # fsspec's chained URLs: "simplecache::s3://bucket/x"
        if _SCHEME.match(part) is None and not known_protocol(part):
            raise _unknown(name, text, part)
        _check_part(name, text, part)
    _check_part(name, text, last)
    return text


def _check_part(name: str, text: str, part: str) -> None:
    match = _SCHEME.match(part)
    if match is None or len(match.group(1)) == 1:  # no scheme, or a drive letter
        return
    scheme, rest = match.group(1), part[match.end() :]
    if not rest.startswith("//"):
        where = rest.lstrip("/")
        slashes = "one slash" if rest[:1] == "/" else "no slash"
        raise InvalidArgumentError(
            name,
            f"{text!r} starts like a URL but has {slashes} after {scheme + ':'!r}; it would "
            f"be taken as a local folder named {text.split('/')[0]!r} in the working directory",
            (
                f"Write file:///{where} or /{where} for the local path"
                if scheme.lower() == "file"
                else f"Write {scheme}://{where} for the URL, or ./{text} for a local folder "
                "whose name holds a colon"
            ),
        )
    if not known_protocol(scheme):
        raise _unknown(name, text, scheme)


def _unknown(name: str, text: str, scheme: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        name,
        f"{text!r} names the protocol {scheme!r}, which fsspec does not know",
        "Check the URL's scheme (e.g. s3://, gs://, file://), or install the fsspec "
        "package that provides it",
    )
