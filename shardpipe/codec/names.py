"""Codecs given by name: ``"zstd"``, ``{"name": "zstd"}``, ``{"name": ..., "configuration": ...}``.

zarr's metadata names a codec by a ``{"name", "configuration"}`` object, and
``zarr.create_array`` takes such dicts or codec objects. People write the
short forms as well (``compressors="zstd"``; the command line's
``--compressor zstd:3``), which zarr 3.4 refuses (a bare name: "Expected a
BytesBytesCodec"; a dict without ``configuration``: "does not have a
'configuration' key"). :func:`codec_specs` turns every form into what zarr
takes, once, for each front door that passes ``compressors``, ``filters``
or ``serializer`` on (:mod:`shardpipe.write.options`, the dataset's
``encoding``): a name, or a dict without ``configuration``, becomes the
codec made with its defaults (as ``ZstdCodec()``: zarr's own reading of
an empty configuration differs for some, e.g. ``bytes`` gets no
``endian``); a full dict is passed on as zarr takes it; a name no
installed codec registers is refused by name, with the nearest registered
ones.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from zarr.registry import _codec_registries, get_codec_class

from shardpipe.errors import InvalidArgumentError

__all__ = ["codec_specs"]


def codec_specs(parameter: str, value: Any) -> Any:
    """``value`` (``compressors``, ``filters`` or ``serializer``) in a form zarr takes.

    Parameters
    ----------
    parameter : str
        The option's name, for messages.
    value : Any
        ``None``, ``"auto"``, a codec name, a ``{"name", "configuration"}``
        dict (``configuration`` optional), a codec object, or a list or
        tuple of them.

    Returns
    -------
    Any
        ``value`` with every name (and dict without ``configuration``) as
        the codec made with its defaults, a list or tuple as a tuple; codec
        objects, full dicts, ``None`` and ``"auto"`` unchanged.

    Raises
    ------
    InvalidArgumentError
        For a name no installed codec registers (naming the nearest ones), a
        codec that has no defaults for what was left out, or a dict without
        a string ``name`` or with a ``configuration`` that is not a dict.
    """
    if value is None or (isinstance(value, str) and value == "auto"):
        return value
    if isinstance(value, list | tuple):
        return tuple(_one(parameter, item) for item in value)
    return _one(parameter, value)


def _one(parameter: str, value: Any) -> Any:
    if isinstance(value, str):
        return _with_defaults(parameter, value)
    if not isinstance(value, Mapping):
        return value  # a codec object: zarr checks it
    name, configuration = value.get("name"), value.get("configuration")
    if isinstance(name, str) and configuration is None and set(value) == {"name"}:
        return _with_defaults(parameter, name)
    if not isinstance(name, str):
        raise InvalidArgumentError(
            parameter,
            f"the codec {dict(value)!r} has no string 'name'",
            'Name the codec, e.g. {"name": "zstd", "configuration": {"level": 3}}',
        )
    if not isinstance(configuration, Mapping):
        raise InvalidArgumentError(
            parameter,
            f"the configuration of codec {name!r} is {configuration!r}, not a dict",
            f'Pass {{"name": "{name}", "configuration": {{...}}}}',
        )
    _known(parameter, name)
    return value


def _with_defaults(parameter: str, name: str) -> Any:
    """The codec ``name`` made with its defaults."""
    codec_class = _known(parameter, name)
    try:
        return codec_class()
    except (TypeError, ValueError) as err:
        raise InvalidArgumentError(
            parameter,
            f"the codec {name!r} has no default for every setting ({err})",
            f'Give its configuration: {{"name": "{name}", "configuration": {{...}}}}',
        ) from None


def _known(parameter: str, name: str) -> Any:
    """The codec class ``name`` names; a refusal naming the nearest if none is installed."""
    names = sorted(n for n, registry in _codec_registries.items() if registry)  # not emptied
    try:
        codec_class = get_codec_class(name)
    except Exception:  # zarr's UnknownCodecError, or a KeyError in older versions
        near = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
        hint = f"Did you mean {' or '.join(repr(n) for n in near)}? " if near else ""
        own = [n for n in names if not n.startswith("numcodecs.")]
        raise InvalidArgumentError(
            parameter,
            f"no installed codec is named {name!r}",
            f"{hint}Use one of {', '.join(own)}, or numcodecs.<name> for a numcodecs codec "
            f"({len(names) - len(own)} installed)",
        ) from None
    return codec_class
