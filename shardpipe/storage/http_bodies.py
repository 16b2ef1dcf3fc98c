"""A shard's body on its way to an HTTP object store: joined once, sent without a copy.

S3 (through botocore and aiobotocore) and GCS (shardpipe's own JSON API
requests) both send bodies with aiohttp; a shard's task joins its encoded
chunks straight into a :class:`SendBody`, which aiohttp then sends as it is.
"""

from __future__ import annotations

from collections.abc import Buffer, Sequence
from typing import Any, SupportsIndex, overload

from aiohttp import payload


class SendBody(bytearray):
    """A shard's bytes as an upload sends them: a ``bytearray`` whose slices are views.

    botocore passes a ``bytearray`` body to aiohttp as it is (a ``bytes``
    body it wraps in a ``BytesIO``, which aiohttp copies whole before it
    sends it), and aiohttp sends the slice of the body up to its
    ``Content-Length``: a copy of it whole for a plain ``bytearray``, a view
    here.
    """

    @overload  # type: ignore[override]  # a view where bytearray makes a copy
    def __getitem__(self, key: SupportsIndex) -> int: ...

    @overload
    def __getitem__(self, key: slice) -> memoryview: ...

    def __getitem__(self, key: SupportsIndex | slice) -> int | memoryview:
        if isinstance(key, slice):
            return memoryview(self)[key]
        return super().__getitem__(key)


HEADERS_APART_FROM = 64 << 10
"""Smallest body :class:`SendBodyPayload` sends after its headers instead of with them."""


@payload.payload_type(SendBody, order=payload.Order.try_first)
class SendBodyPayload(payload.BytesPayload):
    """How aiohttp sends a :class:`SendBody`: its request's headers first, then the body as it is.

    aiohttp holds a request's headers back to send them with the body's
    first write, and on Python before 3.12.9 (and 3.13.0-3.13.1), where it
    does not trust the socket transport's ``writelines``, it joins the two
    into new bytes: a copy of the whole shard, into pages fresh from the
    kernel. Sending the headers on their own leaves nothing to join: the
    body goes to the socket as a view: through the benchmark's shaping proxy
    the thread that sends the requests used 0.126 s of CPU per 256 MiB write
    instead of 0.150-0.164 s.
    """

    async def write_with_length(self, writer: Any, content_length: int | None) -> None:
        """Send the headers alone (where the writer holds them back), then the body.

        A body under :data:`HEADERS_APART_FROM` bytes goes with its headers,
        as aiohttp sends it: copying it costs less than another write.
        """
        send_headers = getattr(writer, "send_headers", None)
        if send_headers is not None and (self.size or 0) >= HEADERS_APART_FROM:
            send_headers()
        await super().write_with_length(writer, content_length)


def send_body(buffers: Sequence[Buffer]) -> SendBody:
    """``buffers`` joined into a :class:`SendBody`; one already joined is returned as it is."""
    if len(buffers) == 1 and isinstance(buffers[0], SendBody):
        return buffers[0]
    body = SendBody()
    for buffer in buffers:
        body += memoryview(buffer).cast("B")
    return body
