"""Just enough HTTP/1.1 framing for :class:`~shardpipe.testing.fault_proxy.FaultProxy` (tests).

The fault proxy forwards raw bytes, but to fault whole requests it has to
know where each request starts and ends in a client's byte stream, what its
request line is, and which bytes coming back are an interim
``100 Continue`` rather than the final response. This module does that and
nothing else: no sockets, no faults.

:class:`RequestFramer`
    Splits a client's byte stream into request heads, body bytes and
    request ends (``Content-Length`` or chunked bodies, with trailers).
:func:`body_framing`
    The body length and whether it is chunked, from a request head.
:func:`request_line`
    The request line (``b"PUT /bucket/key HTTP/1.1"``) of a request head.
:func:`split_continue`
    Splits an interim ``100 Continue`` head off the start of a server's
    bytes.
"""

from __future__ import annotations

from collections.abc import Iterator

__all__ = ["RequestFramer", "body_framing", "request_line", "split_continue"]


def request_line(head: bytes) -> bytes:
    """The request line of a request head, without its CRLF.

    Parameters
    ----------
    head : bytes
        A request head, as :meth:`RequestFramer.feed` yields it.

    Returns
    -------
    bytes
        Its first line, e.g. ``b"POST /bucket/key?uploads HTTP/1.1"``.
    """
    return head.split(b"\r\n", 1)[0]


def body_framing(head: bytes) -> tuple[int, bool]:
    """How the body that follows a request head is framed.

    Parameters
    ----------
    head : bytes
        A complete request head (request line and header lines).

    Returns
    -------
    length : int
        The ``Content-Length`` (0 when there is none).
    chunked : bool
        Whether ``Transfer-Encoding`` is chunked (then ``length`` is ignored).
    """
    length, chunked = 0, False
    for raw in head.split(b"\r\n")[1:]:
        name, _, value = raw.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value.strip())
        elif name == b"transfer-encoding" and b"chunked" in value.lower():
            chunked = True
    return length, chunked


def split_continue(data: bytes) -> tuple[bytes, bytes]:
    """Split an interim ``100 Continue`` response head off the start of ``data``.

    Parameters
    ----------
    data : bytes
        Bytes received from the server.

    Returns
    -------
    interim : bytes
        The complete ``HTTP/1.x 100`` head (with its blank line) that
        ``data`` starts with, or ``b""`` when it starts with none.
    rest : bytes
        The bytes after it (all of ``data`` when ``interim`` is empty).
    """
    if data.startswith(b"HTTP/1.1 100 ") or data.startswith(b"HTTP/1.0 100 "):
        end = data.find(b"\r\n\r\n")
        if end >= 0:
            return data[: end + 4], data[end + 4 :]
    return b"", data


class RequestFramer:
    """Finds where HTTP/1.1 requests start and end in a client's byte stream.

    :meth:`feed` takes bytes as they arrive and yields ``("head", bytes)``
    for each complete request head, ``("body", bytes)`` for body bytes and
    ``("end", b"")`` when the request's body is complete. The bytes fed come
    back in order, each once, in ``"head"`` and ``"body"`` events.
    """

    def __init__(self) -> None:
        self._buf = b""
        self._state = "head"
        self._remaining = 0  # body bytes left (Content-Length) or of the current chunk

    def feed(self, data: bytes) -> Iterator[tuple[str, bytes]]:
        """Consume ``data``; yield the events it completes.

        Parameters
        ----------
        data : bytes
            The next bytes from the client.

        Yields
        ------
        event : str
            ``"head"``, ``"body"`` or ``"end"``.
        chunk : bytes
            The head's or body's bytes; ``b""`` for ``"end"``.
        """
        self._buf += data
        while True:
            if self._state == "head":
                end = self._buf.find(b"\r\n\r\n")
                if end < 0:
                    return
                head, self._buf = self._buf[: end + 4], self._buf[end + 4 :]
                yield "head", head
                length, chunked = body_framing(head)
                if chunked:
                    self._state = "chunk-size"
                elif length:
                    self._state, self._remaining = "body", length
                else:
                    yield "end", b""
            elif self._state in ("body", "chunk-data"):
                if not self._buf:
                    return
                take = self._buf[: self._remaining]
                self._buf = self._buf[len(take) :]
                self._remaining -= len(take)
                yield "body", take
                if self._remaining:
                    return
                if self._state == "body":
                    self._state = "head"
                    yield "end", b""
                else:
                    self._state = "chunk-size"
            elif self._state == "chunk-size":
                end = self._buf.find(b"\r\n")
                if end < 0:
                    return
                line, self._buf = self._buf[: end + 2], self._buf[end + 2 :]
                yield "body", line
                size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                if size:
                    self._state, self._remaining = "chunk-data", size + 2  # data and CRLF
                else:
                    self._state = "trailer"
            else:  # trailer lines until an empty one
                end = self._buf.find(b"\r\n")
                if end < 0:
                    return
                line, self._buf = self._buf[: end + 2], self._buf[end + 2 :]
                yield "body", line
                if line == b"\r\n":
                    self._state = "head"
                    yield "end", b""
