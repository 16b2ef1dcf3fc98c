"""The body of a ``PutObject``: the buffers joined once, with the CRC32C S3 verifies."""

from __future__ import annotations

import base64
from collections.abc import Buffer, Sequence
from typing import Any

import crc32c

from shardpipe.storage.http_bodies import send_body


def put_body(buffers: Sequence[Buffer], checksum: bool = True) -> dict[str, Any]:
    """The ``Body`` of a ``PutObject`` of ``buffers`` joined, and its ``ChecksumCRC32C``.

    Without ``checksum`` (botocore's ``request_checksum_calculation`` is
    ``"when_required"``, as S3-compatible stores that refuse checksum headers
    need), the body alone.

    The body is a :class:`~shardpipe.storage.http_bodies.SendBody`, joined
    here unless a shard's task joined it already
    (:meth:`~shardpipe.storage.s3.store.S3ShardStore.joined_body`):
    the bytes are copied once on their way to the socket (aiohttp sends the
    headers first: :class:`~shardpipe.storage.http_bodies.SendBodyPayload`).
    Its CRC32C is computed here by the hardware instruction (the ``crc32c``
    package) and sent as the checksum S3 verifies, in place of the CRC32
    botocore would compute over the body in Python-driven chunks. Thirty-two
    puts of 5 MiB to a local moto server took 0.28-0.38 s of the client's CPU
    with a ``bytearray`` body and this checksum, against 0.41-0.55 s with a
    ``bytes`` body and botocore's CRC32 (two runs of three).
    """
    body = send_body(buffers)
    if not checksum:
        return {"Body": body}
    value = base64.b64encode(crc32c.crc32c(body).to_bytes(4, "big")).decode("ascii")
    return {"Body": body, "ChecksumAlgorithm": "CRC32C", "ChecksumCRC32C": value}
