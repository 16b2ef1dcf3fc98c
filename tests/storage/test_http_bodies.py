"""A shard's body for an upload: joined once, its slices views, sent after the headers.

An S3 put's checksum is the CRC32C of the joined bytes.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Buffer

import crc32c
import numpy as np
from aiohttp import payload

from shardpipe.storage.http_bodies import SendBody, SendBodyPayload, send_body
from shardpipe.storage.s3.bodies import put_body

PIECES: list[Buffer] = [b"shard ", bytearray(b"bytes "), memoryview(np.arange(4, dtype="uint16"))]
JOINED = b"".join(memoryview(p).cast("B") for p in PIECES)


def test_the_body_is_the_pieces_joined() -> None:
    body = send_body(PIECES)
    assert isinstance(body, SendBody)
    assert bytes(body) == JOINED


def test_a_body_joined_already_is_sent_as_it_is() -> None:
    body = send_body(PIECES)
    assert send_body([body]) is body
    assert put_body([body])["Body"] is body


def test_a_slice_of_the_body_is_a_view_not_a_copy() -> None:
    """What aiohttp sends is ``body[:content_length]``: a copy of it whole for a bytearray."""
    body = send_body(PIECES)
    whole = body[: len(body)]
    assert isinstance(whole, memoryview) and whole.obj is body
    assert bytes(whole) == JOINED
    assert bytes(body[6:12]) == JOINED[6:12]
    assert body[0] == JOINED[0]


def test_the_checksum_is_the_crc32c_of_the_joined_bytes() -> None:
    sent = put_body(PIECES)
    assert sent["ChecksumAlgorithm"] == "CRC32C"
    assert base64.b64decode(sent["ChecksumCRC32C"]) == crc32c.crc32c(JOINED).to_bytes(4, "big")
    assert set(put_body(PIECES, checksum=False)) == {"Body"}


def test_aiohttp_sends_the_headers_alone_then_the_body_as_a_view() -> None:
    """Nothing for aiohttp to join the body to (a copy of the shard, before Python 3.12.9)."""
    sent: list[object] = []

    class Writer:  # the part of aiohttp's StreamWriter a payload calls
        def send_headers(self) -> None:
            sent.append("headers")

        async def write(self, chunk: memoryview) -> None:
            sent.append(chunk)

    body = send_body(PIECES)
    sending = payload.get_payload(body)
    assert isinstance(sending, SendBodyPayload)
    asyncio.run(sending.write_with_length(Writer(), len(body)))
    assert sent[0] == "headers" and len(sent) == 2
    assert isinstance(sent[1], memoryview) and sent[1].obj is body
    assert bytes(sent[1]) == JOINED
