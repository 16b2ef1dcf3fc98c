"""How a fix names what to pass: in Python terms for the API, in flag terms for the CLI.

An error raised by the library tells its reader what to change, and the
reader called either a function (``overwrite=True``,
``storage_options={"endpoint_url": ...}``) or a command (``--overwrite``,
``--storage-option endpoint_url=...``). Every message that names a parameter
or advises a setting builds it here, with :func:`name` and :func:`setting`;
the command line runs its commands inside :func:`command_line_terms`, so the
same check words its fix for the command line there. Nothing else about the
error changes: its class and ``parameter`` stay the Python ones.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from typing import Any

_COMMAND_LINE: ContextVar[bool] = ContextVar("shardpipe_command_line_terms", default=False)

FLAGS: Mapping[str, str] = {
    "source": "SOURCE",
    "target": "TARGET",
    "store": "STORE",
    "path": "--path",
    "group": "--group",
    "overwrite": "--overwrite",
    "resume": "--resume",
    "force": "--force",
    "max_mem": "--max-mem",
    "shards": "--shards",
    "chunks": "--chunks",
    "compressors": "--compressor",
    "index_location": "--index-location",
    "mode": "--mode",
    "append_dim": "--append-dim",
    "region": "--region",
    "write_strategy": "--write-strategy",
    "temp_store": "--temp-store",
    "threshold": "--threshold",
    "storage_options": "--storage-option",
    "source_storage_options": "--source-storage-option",
    "target_storage_options": "--target-storage-option",
}
"""Python parameters -> what the command line calls them (a flag, or a positional argument
as its help names it). A parameter not listed keeps its Python name."""

_REPEATED = frozenset(("storage_options", "source_storage_options", "target_storage_options"))
"""Parameters given as a dict in Python and as ``NAME=VALUE`` pairs on the command line."""


@contextlib.contextmanager
def command_line_terms() -> Iterator[None]:
    """Within, messages name flags (``--overwrite``) instead of parameters."""
    token = _COMMAND_LINE.set(True)
    try:
        yield
    finally:
        _COMMAND_LINE.reset(token)


def for_command_line() -> bool:
    """Whether messages are being worded for the command line."""
    return _COMMAND_LINE.get()


def name(parameter: str) -> str:
    """``parameter`` as the caller spells it: ``storage_options`` or ``--storage-option``."""
    return FLAGS.get(parameter, parameter) if for_command_line() else parameter


def setting(parameter: str, value: Any = True) -> str:
    """How to pass ``value`` for ``parameter``, in the caller's terms.

    Examples
    --------
    >>> setting("overwrite"), setting("storage_options", {"anon": True})
    ('overwrite=True', "storage_options={'anon': True}")
    >>> with command_line_terms():
    ...     setting("overwrite"), setting("storage_options", {"anon": True})
    ('--overwrite', '--storage-option anon=true')
    """
    if not for_command_line():
        return f"{parameter}={value!r}"
    flag = name(parameter)
    if flag == parameter:  # no flag of its own
        return f"{parameter}={value!r}"
    if value is True:
        return flag
    if parameter in _REPEATED and isinstance(value, Mapping):
        return f"{flag} " + " ".join(f"{k}={_flag_value(v)}" for k, v in value.items())
    return f"{flag} {_flag_value(value)}"


def valued(parameter: str, shown: str) -> str:
    """``parameter`` with a value already written out: ``max_mem=1 GiB`` or ``--max-mem 1 GiB``.

    Examples
    --------
    >>> valued("max_mem", "244.1 MiB")
    'max_mem=244.1 MiB'
    >>> with command_line_terms():
    ...     valued("max_mem", "244.1 MiB")
    '--max-mem 244.1 MiB'
    """
    flag = name(parameter)
    return f"{parameter}={shown}" if flag == parameter else f"{flag} {shown}"


def storage_option(*keys: str) -> str:
    """Storage options ``keys`` to set, in the caller's terms: ``'endpoint_url' in
    storage_options`` or ``--storage-option endpoint_url=...``.

    Examples
    --------
    >>> storage_option("key", "secret")
    "'key'/'secret' in storage_options"
    >>> with command_line_terms():
    ...     storage_option("key", "secret")
    '--storage-option key=... / secret=...'
    """
    if for_command_line():
        return f"{name('storage_options')} " + " / ".join(f"{key}=..." for key in keys)
    return "/".join(repr(key) for key in keys) + " in storage_options"


def job(function: str) -> str:
    """A job of shardpipe's, in the caller's terms: ``shardpipe.rechunk`` or
    ``shardpipe rechunk``."""
    return (
        f"shardpipe {function.replace('_', '-')}" if for_command_line() else f"shardpipe.{function}"
    )


def _flag_value(value: Any) -> str:
    """``value`` as typed after a flag: ``64,64,64``, ``true``, ``2GiB``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):  # JSON, quoted for the shell
        return f"'{json.dumps(value)}'"
    if isinstance(value, tuple | list):
        return ",".join(str(v) for v in value)
    return str(value)


def place(path: str, store: object | None = None) -> str:
    """Where a node is, in words: ``'a/b' in STORE``, or ``the root of STORE``.

    A path is quoted, as the caller typed it; the root is no path, so it is
    named in words rather than quoted as if it were one.
    """
    within = f" of {store}" if store is not None else ""
    if path:
        return f"{path!r}" + (f" in {store}" if store is not None else "")
    return "the root" + (within if within else " of the store")
