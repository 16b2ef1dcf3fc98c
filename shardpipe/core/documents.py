"""Stored JSON documents read safely: bytes to a JSON object, or an error naming the document.

Metadata documents (``zarr.json``, a precomputed ``info``, the draft's
documents) and shardpipe's own records may have been cut short, damaged or
forged; :func:`parse_json_object` turns every way their bytes can fail to
be a JSON object into a :class:`~shardpipe.errors.MetadataError`.
"""

from __future__ import annotations

import json
from typing import Any

from shardpipe.errors import MetadataError

_JSON_KINDS = {list: "array", str: "string", int: "number", float: "number", bool: "boolean"}
_JSON_KINDS[type(None)] = "null"


def parse_json_object(data: bytes, what: str, fix: str = "") -> dict[str, Any]:
    """Decode ``data`` as a JSON object.

    Parameters
    ----------
    data : bytes
        The stored bytes.
    what : str
        The document and its key, as error messages name it (``"'a/zarr.json'"``).
    fix : str
        How to fix the document, appended to the message (none by default).

    Raises
    ------
    MetadataError
        If the bytes are not UTF-8, not JSON, nest too deeply or hold
        something other than an object.
    """
    then = f". {fix}" if fix else ""
    try:
        document = json.loads(bytes(data))
    except UnicodeDecodeError as err:
        raise MetadataError(f"{what} is not UTF-8 text ({err}){then}") from err
    except ValueError as err:
        raise MetadataError(f"{what} is not JSON ({err}){then}") from err
    except RecursionError as err:
        raise MetadataError(f"{what} nests JSON too deeply to be metadata{then}") from err
    if not isinstance(document, dict):
        kind = _JSON_KINDS.get(type(document), type(document).__name__)
        raise MetadataError(f"{what} holds a JSON {kind}, not an object{then}")
    return document
