"""Forged ``zarr.json`` documents for the readers, and the child process that opens them.

Each :class:`Forgery` turns the ``zarr.json`` of a small sharded array (``g/arr``,
(16, 16) ``uint16`` in shards of (8, 8) and inner chunks of (4, 4), dimensions
``y`` and ``x``, in the group ``g``) into a document no writer stores: sizes no
array can have, grids Dask cannot hold, or keys of the wrong kind. The test
(:mod:`tests.hostile.test_forged_documents`) builds one store per forgery with
:func:`write_stores` and runs ``python -m tests.hostile.forged_documents ROOT
CASE...``: for each case, every reader (``open_array`` with and without
``max_mem``, ``open_dataset`` on the group, ``verify``, ``info``) on it, in a process
limited to 3 GiB of address space (a grid built in memory ends in a
``MemoryError`` there, not in swapping), one JSON line per call with its
outcome and the seconds it took.
"""

from __future__ import annotations

import copy
import json
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

SHAPE, SHARDS, CHUNKS = (16, 16), (8, 8), (4, 4)
DIMENSIONS = ("y", "x")
VAST = ("Dask", "16,777,216")
"""What the refusal of an array too vast for Dask names (a valid document, an unusable grid):
Dask blocks, and the most shardpipe opens."""


@dataclass(frozen=True)
class Forgery:
    """How to forge the document, and how the readers must refuse it.

    Parameters
    ----------
    forge : callable
        Takes a copy of the valid document and returns what ``zarr.json``
        then holds: a JSON value (written with ``json.dumps``, which writes
        NaN as ``NaN``) or bytes (written as they are).
    refusal : str
        The ``ShardpipeError`` subclass ``open_array`` and ``open_dataset`` raise.
    named : tuple of str
        What their message must hold (the key or value at fault).
    """

    forge: Callable[[dict[str, Any]], Any]
    refusal: str = "MetadataError"
    named: tuple[str, ...] = ()


def _grid(
    shape: list[Any], shards: list[Any], chunks: list[Any]
) -> Callable[[dict[str, Any]], Any]:
    """Shape, shard shape and inner-chunk shape replaced (dimension names to match)."""

    def forge(doc: dict[str, Any]) -> Any:
        doc["shape"] = shape
        doc["chunk_grid"]["configuration"]["chunk_shape"] = shards
        doc["codecs"][0]["configuration"]["chunk_shape"] = chunks
        doc["dimension_names"] = [f"d{i}" for i in range(len(shape))]
        return doc

    return forge


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], Any]:
    def forge(doc: dict[str, Any]) -> Any:
        doc[key] = value
        return doc

    return forge


def _without(key: str) -> Callable[[dict[str, Any]], Any]:
    def forge(doc: dict[str, Any]) -> Any:
        del doc[key]
        return doc

    return forge


def _sharding(key: str, value: Any) -> Callable[[dict[str, Any]], Any]:
    def forge(doc: dict[str, Any]) -> Any:
        doc["codecs"][0]["configuration"][key] = value
        return doc

    return forge


def _nested_sharding(doc: dict[str, Any]) -> Any:
    """A sharding codec inside the shard's chain, with inner chunks of 2**40 x 2**40."""
    nested = copy.deepcopy(doc["codecs"][0])
    nested["configuration"]["chunk_shape"] = [2**40, 2**40]
    doc["codecs"][0]["configuration"]["codecs"] = [nested]
    return doc


FORGERIES: dict[str, Forgery] = {
    "shape 2**62, shards of 1": Forgery(_grid([2**62], [1], [1]), named=("2**63",)),
    "negative shape": Forgery(_grid([-16, 16], [8, 8], [4, 4]), named=("-16",)),
    "shard shape 0": Forgery(_grid([16, 16], [0, 8], [0, 4]), named=("(0, 8)",)),
    "1,000 dimensions": Forgery(_grid([1] * 1000, [1] * 1000, [1] * 1000), named=("1000",)),
    "chunks larger than shards": Forgery(_grid([16, 16], [8, 8], [16, 16]), named=("(16, 16)",)),
    "chunks not dividing shards": Forgery(_grid([16, 16], [8, 8], [3, 3]), named=("(3, 3)",)),
    "shard shape of another rank": Forgery(
        _grid([16, 16], [8, 8, 8], [4, 4]), named=("(8, 8, 8)",)
    ),
    "(10**6)^3, shards of 1": Forgery(
        _grid([10**6] * 3, [1] * 3, [1] * 3), "InvalidArgumentError", VAST
    ),
    "2**60 inner chunks per shard": Forgery(
        _grid([2**40] * 3, [2**20] * 3, [1] * 3), named=("inner chunks",)
    ),
    "inner chunk of 2**40 bytes": Forgery(
        _grid([2**40] * 3, [2**13] * 3, [2**13] * 3), named=("bytes",)
    ),
    "shard shape 1.5": Forgery(_grid([16, 16], [1.5, 8], [4, 4]), named=("1.5",)),
    "huge JSON number": Forgery(_grid([10**400, 16], [8, 8], [4, 4]), named=("1000000000",)),
    "NaN in the shape": Forgery(_grid([float("nan"), 16], [8, 8], [4, 4]), named=("nan",)),
    "dtype unknown": Forgery(_set("data_type", "uint7"), named=("uint7",)),
    "fill value a string": Forgery(_set("fill_value", "abc"), named=("abc",)),
    "fill value NaN for uint16": Forgery(_set("fill_value", float("nan")), named=("nan",)),
    "codecs missing": Forgery(_without("codecs"), named=("'codecs'",)),
    "codec unknown": Forgery(_set("codecs", [{"name": "no-such-codec"}]), named=("no-such-codec",)),
    "nested sharding absurd": Forgery(_nested_sharding, named=("1099511627776",)),
    "index_location bad": Forgery(_sharding("index_location", "middle"), named=("'middle'",)),
    "dimension_names of the wrong length": Forgery(
        _set("dimension_names", ["a", "b", "c"]), named=("'a', 'b', 'c'",)
    ),
    "chunk_key_encoding unknown": Forgery(
        _set("chunk_key_encoding", {"name": "weird", "configuration": {}}), named=("weird",)
    ),
    "chunk_key_encoding separator bad": Forgery(
        _set("chunk_key_encoding", {"name": "default", "configuration": {"separator": "x"}}),
        named=("'x'",),
    ),
    "node_type wrong": Forgery(_set("node_type", "tensor"), named=("'tensor'",)),
    "zarr_format 2 in zarr.json": Forgery(_set("zarr_format", 2), named=("'zarr_format'",)),
    "not an object": Forgery(lambda doc: [1, 2, 3], named=("JSON array",)),
    "not JSON": Forgery(lambda doc: b'{"shape": [16, 16', named=("not JSON",)),
}
"""Every forgery, by name."""

MUST_REFUSE = ("open_array", "open_array max_mem", "open_dataset")
"""The readers that must refuse every forgery (``verify`` and ``info`` may also report it)."""


def write_stores(root: Path, names: list[str] | None = None) -> list[str]:
    """The valid store (``root/base/g/arr``) and one store per forgery of ``names`` (all by
    default) under ``root`` (``root/<n>/g/arr``, ``n`` its place in the list); the names."""
    import shardpipe

    base = root / "base"
    data = np.arange(256, dtype="u2").reshape(SHAPE)
    shardpipe.to_sharded_zarr(
        data, str(base / "g" / "arr"), shards=SHARDS, chunks=CHUNKS, dimension_names=DIMENSIONS
    )
    (base / "g" / "zarr.json").write_text(
        json.dumps({"zarr_format": 3, "node_type": "group", "attributes": {}})
    )
    valid = json.loads((base / "g" / "arr" / "zarr.json").read_text())
    names = list(FORGERIES) if names is None else names
    for number, name in enumerate(names):
        store = root / str(number)
        shutil.copytree(base, store)
        forged = FORGERIES[name].forge(copy.deepcopy(valid))
        text = forged if isinstance(forged, bytes) else json.dumps(forged).encode()
        (store / "g" / "arr" / "zarr.json").write_bytes(text)
    return names


def _readers() -> dict[str, Callable[[Path], Any]]:
    import shardpipe

    return {
        "open_array": lambda store: shardpipe.open_array(str(store / "g" / "arr")),
        "open_array max_mem": lambda store: shardpipe.open_array(
            str(store / "g"), path="arr", max_mem="64MiB"
        ),
        "open_dataset": lambda store: shardpipe.open_dataset(str(store / "g")),
        "verify": lambda store: shardpipe.verify(str(store / "g" / "arr")),
        "info": lambda store: shardpipe.info(str(store / "g" / "arr")),
    }


def main(root: str, names: list[str]) -> None:
    """Run every reader on the store of each case; print one JSON line per call."""
    import resource
    import warnings

    import dask

    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
    warnings.simplefilter("ignore")
    dask.config.set(scheduler="synchronous")
    from shardpipe.errors import ShardpipeError

    readers = _readers()
    for reader in readers.values():  # the imports each reader needs, before any is timed
        reader(Path(root) / "base")
    for number, name in enumerate(names):
        for reader_name, reader in readers.items():
            start = time.perf_counter()
            try:
                reader(Path(root) / str(number))
                outcome = {"outcome": "returned", "error": "", "message": ""}
            except ShardpipeError as err:
                outcome = {"outcome": "refused", "error": type(err).__name__, "message": str(err)}
            except BaseException as err:  # anything else is a finding
                outcome = {"outcome": "raw", "error": type(err).__name__, "message": str(err)}
            seconds = time.perf_counter() - start
            line = {"case": name, "reader": reader_name, "seconds": seconds, **outcome}
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
