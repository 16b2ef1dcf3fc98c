"""``checksummed_compressors`` resolves codec objects itself, the rest through zarr: same result.

Codec objects (and None) are resolved without asking zarr to create an
array in memory (about a millisecond a call); every other spelling is
left to zarr. Either way the chain that reaches the array must be the one
zarr would make of the spelling, with one ``crc32c`` at most.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import zarr
from zarr.codecs import BloscCodec, Crc32cCodec, GzipCodec, ZstdCodec
from zarr.storage import MemoryStore

from shardpipe.codec.checksums import checksummed_compressors

SPELLINGS: dict[str, Any] = {
    "none": None,
    "empty list": [],
    "auto": "auto",
    "one codec": ZstdCodec(level=3),
    "codec list": [GzipCodec(level=2)],
    "codec tuple": (BloscCodec(cname="lz4", clevel=1),),
    "dict": {"name": "zstd", "configuration": {"level": 2}},
    "dict list": [{"name": "gzip", "configuration": {"level": 1}}],
    "with crc32c": [ZstdCodec(level=1), Crc32cCodec()],
    "zstd checksum": ZstdCodec(level=1, checksum=True),
}


def _zarr_chain(compressors: Any) -> tuple[Any, ...]:
    """The bytes-to-bytes codecs zarr stores for ``compressors`` (a real array, in memory)."""
    array = zarr.create_array(
        MemoryStore(), shape=(4,), dtype="uint16", chunks=(4,), compressors=compressors
    )
    return tuple(array.compressors)


@pytest.mark.parametrize("name", SPELLINGS)
def test_the_chain_is_the_one_zarr_makes_of_the_spelling_plus_one_crc32c(name: str) -> None:
    spelling = SPELLINGS[name]
    checked = checksummed_compressors(spelling, np.dtype("uint16"), chunk_checksums=True)
    chain = _zarr_chain(checked)
    assert sum(isinstance(c, Crc32cCodec) for c in chain) <= 1
    given = _zarr_chain(spelling)
    if any(isinstance(c, Crc32cCodec) for c in given) or (
        given and isinstance(given[-1], ZstdCodec) and given[-1].checksum
    ):
        assert chain == given  # already checked: left as it is
    else:
        assert chain == (*given, Crc32cCodec())


@pytest.mark.parametrize("name", SPELLINGS)
def test_without_chunk_checksums_the_spelling_is_untouched(name: str) -> None:
    spelling = SPELLINGS[name]
    assert checksummed_compressors(spelling, "uint16", chunk_checksums=False) is spelling


def test_a_spelling_zarr_rejects_is_still_named() -> None:
    with pytest.raises(Exception, match="compressors"):
        checksummed_compressors([ZstdCodec(), 42], "uint16", chunk_checksums=True)
