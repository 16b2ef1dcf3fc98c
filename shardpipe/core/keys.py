"""Store keys: the one check that keeps every key inside its store.

A key is a ``/``-separated path relative to a store's root
(``"group/array/c/0/1"``). Keys that shardpipe builds from arguments are
checked where the argument is parsed; keys that come from *stored bytes*
(metadata documents, listings, markers and records, a precomputed ``info``,
draft node names) could have been written by anyone, so they go through
:func:`checked_key` before they reach a backend, and every backend checks
the keys it is given again at its edge.

A safe key has no empty, ``.`` or ``..`` part, does not start with ``/``,
and holds no NUL and no backslash (a separator on some systems). Nothing
else is forbidden: zarr keys may hold any other character.
"""

from __future__ import annotations

from shardpipe.errors import UnsafeKeyError


def key_problem(key: str, *, prefix: bool = False) -> str | None:
    """What makes ``key`` unsafe, or None when it stays inside the store.

    Parameters
    ----------
    key : str
        The key to check.
    prefix : bool
        Whether ``key`` is a key prefix, which may be empty (the root) or end
        with ``/``.

    Returns
    -------
    str or None
        The reason in words, or None.
    """
    if not isinstance(key, str):
        return f"a key must be a str, not {type(key).__name__}"
    if prefix:
        if key == "":
            return None
        key = key.removesuffix("/")
    if key == "":
        return "it is empty"
    if "\0" in key:
        return "it holds a NUL character"
    if "\\" in key:
        return "it holds a backslash"
    if key.startswith("/"):
        return "it is an absolute path"
    for part in key.split("/"):
        if part == "":
            return "it has an empty part ('//')"
        if part in (".", ".."):
            return f"it has a {part!r} part"
    return None


def checked_key(key: str, origin: str = "", *, prefix: bool = False) -> str:
    """Return ``key`` if it stays inside the store, else raise.

    Parameters
    ----------
    key : str
        The key (or, with ``prefix=True``, key prefix) to check.
    origin : str
        Where the key came from, for the error message.
    prefix : bool
        Accept ``""`` and a trailing ``/``.

    Returns
    -------
    str
        ``key``, unchanged.

    Raises
    ------
    shardpipe.errors.UnsafeKeyError
        Naming the key, its origin and what is wrong with it.
    """
    problem = key_problem(key, prefix=prefix)
    if problem is not None:
        raise UnsafeKeyError(str(key), origin, problem)
    return key
