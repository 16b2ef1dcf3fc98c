"""What every file system's ``storage_options`` check shares: the names it takes, the refusal.

fsspec file systems drop (or pass on to a client that fails later) an
option they do not know, so that a misspelt name silently writes with the
wrong credentials or endpoint. The checks of each store
(:mod:`~shardpipe.storage.option_names` for S3,
:mod:`~shardpipe.storage.gcs.options`, :mod:`~shardpipe.storage.azure.options`)
read the names a file system class takes from its signature, so that a
newer release's options are accepted, and refuse any other one, naming the
closest valid name.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Mapping
from typing import Any

from shardpipe import advice
from shardpipe.errors import InvalidArgumentError

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


def filesystem_options(cls: type) -> frozenset[str]:
    """The names ``cls.__init__`` takes by name, and fsspec's common ones."""
    init = cls.__init__  # type: ignore[misc]  # the class's own, or the one it inherits
    parameters = inspect.signature(init).parameters.values()
    named = {p.name for p in parameters if p.kind is p.POSITIONAL_OR_KEYWORD}
    return frozenset(named - {"self"}) | FSSPEC_OPTIONS


def closest_option(key: str, valid: frozenset[str]) -> str:
    """``"Did you mean 'x'? The options are ..."``: the fix for an unknown name ``key``."""
    closest = difflib.get_close_matches(key, sorted(valid), n=1, cutoff=0.6)
    listed = ", ".join(sorted(valid - FSSPEC_OPTIONS))
    if closest:
        return f"Did you mean {closest[0]!r}? The options are {listed}"
    return f"The options are {listed}, and fsspec's {', '.join(sorted(FSSPEC_OPTIONS))}"


SECRET_WORDS = ("key", "secret", "token", "password", "credential", "sas", "connection")
"""Parts of option names whose values are not shown in messages (a misspelt name may hold a
secret as well as a right one)."""


def may_be_secret(key: str) -> bool:
    """Whether option ``key``'s name says its value may be a secret (not to be shown)."""
    return any(word in key.lower() for word in SECRET_WORDS)


def shown_value(key: str, value: object) -> str:
    """``value`` of option ``key`` as a message shows it: ``'...'`` for what may be a secret."""
    return "'...'" if may_be_secret(key) else repr(value)


def unknown_option(
    parameter: str, key: str, valid: frozenset[str], owner: str
) -> InvalidArgumentError:
    """The error for option ``key`` of ``parameter``, which ``owner`` (a class) does not take.

    Its value is not shown: the name is unknown, so whether it holds a secret is too.
    """
    problem = f"{key!r} is not an option of {owner}"
    return InvalidArgumentError(parameter, problem, closest_option(key, valid))


_EXAMPLES: dict[str, dict[str, Any]] = {
    "client_kwargs": {"endpoint_url": "http://host:9000"},
    "config_kwargs": {"connect_timeout": 10},
}
"""What goes into the mapping options most often given, for the examples of errors."""


def check_option_types(parameter: str, options: Mapping[str, Any] | None) -> None:
    """Refuse options of the wrong type before a client is made of them.

    Options named ``*_kwargs`` (``client_kwargs``, ``config_kwargs``...) are
    mappings, and an ``endpoint_url``, given alone or in ``client_kwargs``, is
    a URL: a string on the command line (``client_kwargs=http://...``,
    JSON whose quotes the shell took) otherwise failed deep in the client
    (``'str' object has no attribute 'get'``).
    """
    options = options or {}
    for key, value in options.items():
        if key.endswith("_kwargs") and value is not None and not isinstance(value, Mapping):
            inside = _EXAMPLES.get(key, {"name": "value"})
            example = advice.setting(parameter, {key: inside})
            raise InvalidArgumentError(
                parameter,
                f"{key!r} (given {shown_value(key, value)}) must be a mapping of names to values",
                f"Give a mapping, e.g. {example}",
            )
    client = options.get("client_kwargs") or {}
    for where, value in (
        ("endpoint_url", options.get("endpoint_url")),
        ("client_kwargs endpoint_url", client.get("endpoint_url")),
    ):
        if value is not None and not isinstance(value, str):
            raise InvalidArgumentError(
                parameter,
                f"{where} (given {value!r}) is not a URL",
                "Give the endpoint's URL as a string, e.g. 'http://host:9000'",
            )
