"""A TCP proxy that shapes latency and bandwidth and counts HTTP requests, in its own process.

:class:`ShapingProxy` starts :func:`serve` in a child process (``spawn``) with
an asyncio event loop of its own, so the writers' GIL and event loops never
delay it. It listens on ``127.0.0.1`` and forwards every connection to one
upstream HTTP server (the benchmark's moto S3 server).

Model
-----
Each direction of each proxied connection is a link of its own with a
one-way delay of ``rtt / 2`` and a bandwidth cap of ``rate`` bytes/s:

* bytes read from one side are paced by a token bucket (``rate`` bytes/s,
  burst of one read, up to :data:`READ_SIZE`) before they enter the link, so
  a sender sees back-pressure at the cap, as TCP would give it;
* they leave the link, in order, ``rtt / 2`` after they entered it (a delay
  line, bounded to about one bandwidth-delay product plus a few reads).

So every HTTP request, whether it opens a connection or reuses a keep-alive
one, waits one round trip between its first byte leaving the client and
the first byte of its response arriving, plus its transfer times at the cap;
an ``Expect: 100-continue`` exchange costs one more round trip, as on S3. A
new connection's first bytes wait one extra ``rtt`` (the TCP handshake; no
TLS). Requests of one connection are serialized as HTTP/1.1 serializes them;
parallelism comes only from more connections, each with its own cap.

Counting
--------
The client-to-server stream of each connection is framed as HTTP/1.1
(request head, then a ``Content-Length`` body or a chunked one; keep-alive
connections carry many requests) and each request is counted by method and
by S3 operation (:func:`s3_operation`). Responses are not parsed. A small
control server (``reset``, ``counts``, ``stop``, one line each; answers are
one JSON line) reads and resets the counters: :func:`control`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import multiprocessing
import socket
import time
from collections import Counter
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

from benchmarks.http_frames import RequestFramer, keep_alive

READ_SIZE = 256 * 1024
"""Largest read from a socket: the token bucket's burst and the delay line's unit."""


@dataclass
class Counts:
    """What the proxy has seen since the last reset."""

    methods: Counter[str] = field(default_factory=Counter)
    operations: Counter[str] = field(default_factory=Counter)
    connections: int = 0
    open_now: int = 0
    open_peak: int = 0
    bytes_up: int = 0
    bytes_down: int = 0
    unparsed_connections: int = 0
    since: float = field(default_factory=time.monotonic)
    cpu_since: float = field(default_factory=time.process_time)

    def snapshot(self) -> dict[str, Any]:
        """The counters as a JSON-able dict, with the proxy process's CPU seconds since."""
        return {
            "requests": sum(self.methods.values()),
            "methods": dict(self.methods),
            "operations": dict(self.operations),
            "connections": self.connections,
            "open_peak": self.open_peak,
            "bytes_up": self.bytes_up,
            "bytes_down": self.bytes_down,
            "unparsed_connections": self.unparsed_connections,
            "seconds": time.monotonic() - self.since,
            "proxy_cpu_s": time.process_time() - self.cpu_since,
        }


class TokenBucket:
    """Paces a byte stream at ``rate`` bytes/s (None: unlimited); the debt is slept off."""

    def __init__(self, rate: float | None) -> None:
        self.rate = rate
        self.tokens = float(READ_SIZE)
        self.stamp = time.monotonic()

    async def take(self, n: int) -> None:
        """Spend ``n`` bytes' worth of tokens, sleeping while the bucket is in debt."""
        if not self.rate:
            return
        now = time.monotonic()
        self.tokens = min(float(READ_SIZE), self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        self.tokens -= n
        if self.tokens < 0:
            await asyncio.sleep(-self.tokens / self.rate)


@dataclass
class Shaping:
    """The link of every connection: round-trip time (s) and cap per direction (bytes/s)."""

    rtt: float
    rate: float | None

    @property
    def queue_reads(self) -> int:
        """Reads the delay line may hold: one bandwidth-delay product plus a few."""
        bdp = (self.rate or 1e9) * self.rtt / 2
        return max(4, math.ceil(bdp / READ_SIZE) + 4)


class Link:
    """One direction of one connection: a token bucket, then a delay line, then ``writer``.

    :meth:`send` paces at the cap (the sender waits: back-pressure) and queues
    the bytes for delivery ``rtt / 2`` later (plus ``first_delay`` for the
    first bytes: a new connection's handshake); :meth:`run` delivers them in
    order, handing each piece to ``deliver`` (a coroutine function).
    """

    def __init__(self, shaping: Shaping, deliver: Any, first_delay: float = 0.0) -> None:
        self.shaping = shaping
        self.deliver = deliver
        self.extra = first_delay
        self.bucket = TokenBucket(shaping.rate)
        self.line: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue(shaping.queue_reads)
        self.failed = False

    async def send(self, data: bytes) -> None:
        """Pace ``data`` at the cap and put it on the line (empty bytes: the end)."""
        if data:
            await self.bucket.take(len(data))
        due = asyncio.get_running_loop().time() + self.shaping.rtt / 2 + self.extra
        self.extra = 0.0
        await self.line.put((due, data))

    async def run(self) -> None:
        """Deliver until the end; after a failed delivery drop the rest (never block senders)."""
        loop = asyncio.get_running_loop()
        while (item := await self.line.get())[1]:
            due, data = item
            if self.failed:
                continue
            if (wait := due - loop.time()) > 0:
                await asyncio.sleep(wait)
            try:
                await self.deliver(data)
            except OSError:
                self.failed = True


class ClientConnection:
    """One client connection: kept alive, each request on a fresh upstream connection.

    moto's server (werkzeug) answers every request with ``Connection: close``;
    S3 keeps connections alive. So the proxy opens an upstream connection per
    request (local, free), forwards the request's bytes to it, relays its
    response with ``Connection: keep-alive`` (when the body is framed) and
    keeps the client's connection open, as S3 would.
    """

    def __init__(self, server: ProxyServer, reader: Any, writer: Any) -> None:
        self.server, self.reader, self.writer = server, reader, writer
        self.framer = RequestFramer(server.counts)
        self.started = 0  # requests whose first bytes went upstream
        self.upstream: Any = None  # the current request's upstream writer
        self.response: asyncio.Task[None] | None = None  # relaying the current response
        self.keep = True
        self.up = Link(server.shaping, self._to_upstream, first_delay=server.shaping.rtt)
        self.down = Link(server.shaping, self._to_client)

    async def _to_client(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def _to_upstream(self, data: bytes) -> None:
        self.framer.counts = self.server.counts  # a reset moves later requests to new counts
        starts = self.framer.feed(data)
        bounds = [0, *starts, len(data)]
        for i, (a, b) in enumerate(itertools.pairwise(bounds)):
            if i > 0:  # a request starts at a: a new upstream connection for it
                self.started += 1
                await self._open(self.started)
            if b > a and self.upstream is not None:
                self.upstream.write(data[a:b])
                await self.upstream.drain()

    async def _open(self, index: int) -> None:
        if self.upstream is not None and self.upstream.can_write_eof():
            self.upstream.write_eof()
        reader, self.upstream = await asyncio.open_connection(*self.server.upstream)
        self.response = asyncio.create_task(self._relay(reader, self.response, index))

    async def _relay(
        self, reader: asyncio.StreamReader, before: asyncio.Task[None] | None, index: int
    ) -> None:
        """Relay one response (until the server closes) after the one before it."""
        if before is not None:
            with contextlib.suppress(Exception):
                await before
        head = bytearray()
        final = False
        while data := await reader.read(READ_SIZE):
            self.server.counts.bytes_down += len(data)
            if not final:
                head += data
                while not final and (end := head.find(b"\r\n\r\n")) >= 0:
                    one, rest = bytes(head[: end + 4]), head[end + 4 :]
                    if one.startswith(b"HTTP/1.1 1") or one.startswith(b"HTTP/1.0 1"):
                        await self.down.send(one)  # an interim response (100 Continue)
                    else:
                        methods = self.framer.methods
                        method = methods[index - 1] if index <= len(methods) else ""
                        one, self.keep = keep_alive(one[:-4], method)
                        await self.down.send(one + b"\r\n\r\n")
                        final = True
                    head = rest
                if final and head:
                    await self.down.send(bytes(head))
                continue
            await self.down.send(data)
        if not self.keep:  # the body ended with the server's close: so must the client's
            await self.down.send(b"")

    async def _down_then_close(self) -> None:
        await self.down.run()
        self.writer.close()

    async def run(self) -> None:
        """Proxy until the client closes (or a response needed the connection closed)."""
        up = asyncio.create_task(self.up.run())
        down = asyncio.create_task(self._down_then_close())
        try:
            while self.keep and (data := await self.reader.read(READ_SIZE)):
                self.server.counts.bytes_up += len(data)
                await self.up.send(data)
        except OSError:
            pass
        finally:
            await self.up.send(b"")
            await up
            if self.response is not None:
                with contextlib.suppress(Exception):
                    await self.response
            if self.keep:
                await self.down.send(b"")
            await down
            for w in (self.writer, self.upstream):
                if w is not None:
                    w.close()


class ProxyServer:
    """The proxy's listening side, running in the proxy process's event loop."""

    def __init__(self, upstream: tuple[str, int], shaping: Shaping) -> None:
        self.upstream = upstream
        self.shaping = shaping
        self.counts = Counts()
        self.stopped = asyncio.Event()

    async def connection(self, reader: asyncio.StreamReader, writer: Any) -> None:
        """Proxy one client connection until it is done."""
        self.counts.connections += 1
        self.counts.open_now += 1
        self.counts.open_peak = max(self.counts.open_peak, self.counts.open_now)
        with contextlib.suppress(OSError):
            writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            await ClientConnection(self, reader, writer).run()
        finally:
            self.counts.open_now -= 1

    async def control(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Answer control commands: ``counts``, ``reset`` (returns the counts before), ``stop``."""
        while command := (await reader.readline()).decode().strip():
            answer = self.counts.snapshot()
            if command == "reset":
                open_now = self.counts.open_now
                self.counts = Counts(open_now=open_now, open_peak=open_now)
            elif command == "stop":
                self.stopped.set()
            elif command != "counts":
                answer = {"error": f"unknown command {command!r}"}
            writer.write(json.dumps(answer).encode() + b"\n")
            await writer.drain()
        writer.close()


async def _main(upstream: str, shaping: Shaping, report: Any) -> None:
    parts = urlsplit(upstream)
    server = ProxyServer((parts.hostname or "127.0.0.1", parts.port or 80), shaping)
    proxy = await asyncio.start_server(server.connection, "127.0.0.1", 0, backlog=512)
    ctl = await asyncio.start_server(server.control, "127.0.0.1", 0)
    report.send([s.sockets[0].getsockname()[1] for s in (proxy, ctl)])
    report.close()
    async with proxy, ctl:
        await server.stopped.wait()


def serve(upstream: str, rtt: float, rate: float | None, report: Any) -> None:
    """The proxy process: listen, send ``[proxy port, control port]`` on ``report``, serve.

    Runs until a ``stop`` command (or until the process is terminated).
    """
    asyncio.run(_main(upstream, Shaping(rtt, rate), report))


def control(address: tuple[str, int], command: str) -> dict[str, Any]:
    """Send one command to a proxy's control server; return its JSON answer."""
    with socket.create_connection(address, timeout=30) as sock:
        sock.sendall(command.encode() + b"\n")
        with sock.makefile("rb") as answers:
            answer: dict[str, Any] = json.loads(answers.readline())
    return answer


class ShapingProxy:
    """Run :func:`serve` in a child process; a context manager.

    Parameters
    ----------
    upstream : str
        The server's URL (``http://host:port``).
    rtt : float
        Round-trip time added per request, in seconds (half each way).
    rate : float or None
        Cap per connection and direction, in bytes/s; None: none.

    Attributes
    ----------
    url : str
        The proxy's endpoint URL (set on entry).
    control_address : tuple of (str, int)
        Its control server (set on entry); see :func:`control`.
    """

    def __init__(self, upstream: str, rtt: float, rate: float | None) -> None:
        self.upstream, self.rtt, self.rate = upstream, rtt, rate
        self.url = ""
        self.control_address = ("127.0.0.1", 0)
        self.process: Any = None

    def __enter__(self) -> ShapingProxy:
        ctx = multiprocessing.get_context("spawn")
        receive, send = ctx.Pipe(duplex=False)
        self.process = ctx.Process(
            target=serve, args=(self.upstream, self.rtt, self.rate, send), daemon=True
        )
        self.process.start()
        send.close()
        if not receive.poll(60):
            self.process.terminate()
            raise RuntimeError("the shaping proxy did not start within 60 s")
        port, control_port = receive.recv()
        self.url = f"http://127.0.0.1:{port}"
        self.control_address = ("127.0.0.1", control_port)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        with contextlib.suppress(OSError, ValueError):
            control(self.control_address, "stop")
        self.process.join(10)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(5)
