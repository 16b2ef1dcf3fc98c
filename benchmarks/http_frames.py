"""HTTP/1.1 framing for the shaping proxy (:mod:`benchmarks.shaping_proxy`).

:class:`RequestFramer` finds where requests start in a connection's
client-to-server bytes (keep-alive connections carry many: a head, then a
``Content-Length`` or chunked body) and counts them by method and by S3
operation (:func:`s3_operation`); :func:`keep_alive` rewrites a response
head so the client may keep its connection.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from benchmarks.shaping_proxy import Counts

HEAD_LIMIT = 64 * 1024
"""A request head (or chunk-size line) longer than this stops the counting of its connection."""


def s3_operation(method: str, target: str) -> str:
    """Name the S3 operation of a request from its method and request target (path?query).

    Distinguishes what a writer of shards sends: whole-object ``PUT``,
    ``UploadPart`` (``PUT ...?partNumber=&uploadId=``), ``CreateMultipartUpload``
    (``POST ...?uploads``), ``CompleteMultipartUpload`` (``POST ...?uploadId=``),
    listings (``GET`` of the bucket with ``list-type`` or ``prefix``) and object reads.
    """
    path, _, query = target.partition("?")
    names = {part.split("=", 1)[0] for part in query.split("&") if part}
    if method == "PUT":
        return "UploadPart" if "partNumber" in names else "PutObject"
    if method == "POST":
        if "uploads" in names:
            return "CreateMultipartUpload"
        if "uploadId" in names:
            return "CompleteMultipartUpload"
        return "DeleteObjects" if "delete" in names else "POST other"
    if method == "GET":
        listing = names & {"list-type", "prefix", "delimiter", "uploads"}
        return "List" if listing or path.strip("/").count("/") == 0 else "GetObject"
    if method == "DELETE":
        return "AbortMultipartUpload" if "uploadId" in names else "DeleteObject"
    return f"{method}Object" if method == "HEAD" else method


class RequestFramer:
    """Finds the requests in one connection's client-to-server bytes (HTTP/1.1, incremental).

    Parameters
    ----------
    counts : Counts
        Where each request's method and S3 operation are counted.
    """

    def __init__(self, counts: Counts) -> None:
        self.counts = counts
        self.state = "head"  # head | chunk-size | trailer
        self.skip = 0  # body bytes still to pass over
        self.buffer = bytearray()
        self.broken = False
        self.methods: list[str] = []

    def feed(self, data: bytes) -> list[int]:
        """Consume the next bytes of the stream; return where in ``data`` requests start.

        Each request head found is counted (and its method appended to :attr:`methods`).
        """
        starts = []
        pos, n = 0, len(data)
        while pos < n and not self.broken:
            if self.skip:
                step = min(self.skip, n - pos)
                self.skip -= step
                pos += step
                continue
            if self.state == "head" and not self.buffer and data[pos : pos + 2] != b"\r\n":
                starts.append(pos)
            marker = b"\r\n\r\n" if self.state == "head" else b"\r\n"
            start = len(self.buffer)
            self.buffer += data[pos : pos + HEAD_LIMIT]
            found = self.buffer.find(marker, max(0, start - len(marker) + 1))
            if found < 0:
                pos += len(self.buffer) - start
                if len(self.buffer) > HEAD_LIMIT:
                    self._give_up()
                continue
            pos += found + len(marker) - start
            unit = bytes(self.buffer[:found])
            self.buffer.clear()
            try:
                self._unit(unit)
            except ValueError:
                self._give_up()
        return starts

    def _give_up(self) -> None:
        self.broken = True
        self.buffer.clear()
        self.counts.unparsed_connections += 1

    def _unit(self, unit: bytes) -> None:
        if self.state == "chunk-size":
            size = int(unit.split(b";", 1)[0].strip() or b"x", 16)
            if size == 0:
                self.state = "trailer"
            else:
                self.skip = size + 2  # the chunk's data and its CRLF
        elif self.state == "trailer":
            if not unit:  # the empty line that ends the trailer
                self.state = "head"
        else:
            self._head(unit.lstrip(b"\r\n"))

    def _head(self, head: bytes) -> None:
        line, *header_lines = head.decode("latin-1").split("\r\n")
        method, target, _version = line.split(" ", 2)
        self.methods.append(method)
        self.counts.methods[method] += 1
        self.counts.operations[s3_operation(method, target)] += 1
        headers = {}
        for header in header_lines:
            name, _, value = header.partition(":")
            headers[name.strip().lower()] = value.strip().lower()
        if "chunked" in headers.get("transfer-encoding", ""):
            self.state = "chunk-size"
        else:
            self.skip = int(headers.get("content-length", "0"))


def keep_alive(head: bytes, method: str) -> tuple[bytes, bool]:
    """Turn a final response head's ``Connection: close`` into keep-alive, if its body is framed.

    Returns the head to send and whether the client's connection may stay
    open (the body's end is known without the server closing the connection).
    """
    lines = head.split(b"\r\n")
    status = int(lines[0].split(b" ", 2)[1])
    names = {line.split(b":", 1)[0].strip().lower() for line in lines[1:]}
    chunked = any(
        line.lower().startswith(b"transfer-encoding:") and b"chunked" in line.lower()
        for line in lines[1:]
    )
    framed = method == "HEAD" or status in (204, 304) or b"content-length" in names or chunked
    if not framed:
        return head, False
    kept = [line for line in lines if not line.lower().startswith(b"connection:")]
    return b"\r\n".join([*kept[:1], b"Connection: keep-alive", *kept[1:]]), True
