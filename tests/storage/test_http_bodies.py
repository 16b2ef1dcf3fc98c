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
from aiohttp.http_writer import StreamWriter
from multidict import CIMultiDict

from shardpipe.storage.http_bodies import (
    HEADERS_APART_FROM,
    SendBody,
    SendBodyPayload,
    send_body,
)
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


class _Transport:
    """What aiohttp's ``StreamWriter`` writes to a socket, kept."""

    def __init__(self) -> None:
        self.writes: list[object] = []

    def write(self, data: object) -> None:
        self.writes.append(data)

    def writelines(self, chunks: object) -> None:
        self.writes.append(list(chunks))  # type: ignore[call-overload]

    def is_closing(self) -> bool:
        return False


class _Protocol:
    def __init__(self) -> None:
        self.transport = _Transport()
        self._paused = False  # never: the writes are kept, not sent

    async def _drain_helper(self) -> None:
        return None


def _sent(body: SendBody) -> list[object]:
    """What aiohttp's own writer sends for a request with ``body``."""
    protocol = _Protocol()

    async def send() -> None:
        writer = StreamWriter(protocol, asyncio.get_running_loop())  # type: ignore[arg-type]
        headers = CIMultiDict({"Content-Length": str(len(body))})
        await writer.write_headers("PUT /c/0 HTTP/1.1", headers)
        sending = payload.get_payload(body)
        assert isinstance(sending, SendBodyPayload)
        await sending.write_with_length(writer, len(body))

    asyncio.run(send())
    return protocol.transport.writes


def test_aiohttp_sends_the_headers_alone_then_the_body_as_a_view() -> None:
    """Nothing for aiohttp to join the body to (a copy of the shard, before Python 3.12.9)."""
    body = send_body([bytes(HEADERS_APART_FROM), b"tail"])
    headers, sent = _sent(body)
    assert isinstance(headers, bytes) and headers.endswith(b"\r\n\r\n")
    assert headers.startswith(b"PUT /c/0 HTTP/1.1\r\n")
    assert isinstance(sent, memoryview) and sent.obj is body and sent.nbytes == len(body)


def test_a_small_body_goes_with_its_headers() -> None:
    """Under the threshold aiohttp sends both in one write, as it does any body."""
    body = send_body(PIECES)
    (sent,) = _sent(body)
    joined = b"".join(sent) if isinstance(sent, list) else bytes(sent)  # type: ignore[arg-type]
    assert joined.endswith(b"\r\n\r\n" + JOINED)
