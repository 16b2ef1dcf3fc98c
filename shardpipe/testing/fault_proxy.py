"""A TCP proxy that injects network faults between an HTTP client and a server (tests).

:class:`FaultProxy` listens on ``127.0.0.1`` and forwards every connection to
an upstream server (the moto S3 server in shardpipe's tests). It reads just
enough HTTP/1.1 from the client side to know where each request starts and
ends (``Content-Length`` or chunked bodies; the framing is in
:mod:`shardpipe.testing.http_framing`), and for a configurable, seeded
share of requests it injects one of four faults:

``"reset_before"``
    The connection is reset (RST, via ``SO_LINGER`` 0) as soon as the
    request's head arrives: the server never sees the request.
``"reset_after"``
    The whole request is forwarded; when the server's response starts to
    come back, the client's connection is reset instead: the server did
    the work, the client never hears about it (a lost response).
``"drop"``
    The request is forwarded and the response swallowed; the client's
    connection stays open and silent until the client gives up (its read
    timeout) or ``drop_seconds`` pass, then it is reset.
``"stall"``
    The response is held back for ``stall_seconds``, then delivered.

Requests can also be faulted on purpose with :meth:`FaultProxy.add_rule`
(for example the next ``POST ...?uploads`` request, which is S3's
CreateMultipartUpload). Counters of what was done are in
:attr:`FaultProxy.counts`; :attr:`FaultProxy.log` lists the faulted requests.

Faults are drawn per request (an HTTP client reuses a connection for many
requests): with ``reset_before=0.1`` about a tenth of the requests are reset.
The draws come from one ``random.Random(seed)``; since connections run in
threads the order in which requests draw varies from run to run, so the
share is reproducible but not which request is hit.

Plain sockets and threads, one thread per connection; meant for tests, not
for production traffic. Use it as a context manager::

    with FaultProxy(("127.0.0.1", 5000), reset_after=0.1, seed=3) as proxy:
        ...  # point the client at proxy.url
    print(proxy.counts)

``shardpipe.testing.s3`` has a pytest fixture, ``s3_fault_proxy``, that puts
one in front of the session's moto server.
"""

from __future__ import annotations

import contextlib
import random
import selectors
import socket
import struct
import threading
import time
from dataclasses import dataclass, field, replace
from types import TracebackType
from typing import Literal
from urllib.parse import urlsplit

from shardpipe.testing.http_framing import RequestFramer, request_line, split_continue

FaultAction = Literal["reset_before", "reset_after", "drop", "stall"]
"""What the proxy does to a request (see the module docstring)."""

ACTIONS: tuple[FaultAction, ...] = ("reset_before", "reset_after", "drop", "stall")

_POLL = 0.1  # seconds between checks of the stop flag
_BUFSIZE = 256 * 1024


@dataclass(frozen=True)
class FaultRule:
    """Fault the next ``count`` requests whose request line contains ``match``.

    Parameters
    ----------
    action : FaultAction
        What to do to them.
    match : bytes
        A substring of the request line, e.g. ``b"?uploads "`` (S3's
        CreateMultipartUpload) or ``b"POST "``; empty matches every request.
    count : int
        How many requests to fault.
    method : bytes
        Only requests of this HTTP method (``b"POST"``); empty for any.
    """

    action: FaultAction
    match: bytes = b""
    count: int = 1
    method: bytes = b""

    def matches(self, line: bytes) -> bool:
        """Whether the request line ``line`` is one of the requests to fault."""
        method = line.split(b" ", 1)[0]
        return self.match in line and (not self.method or self.method == method)


@dataclass
class FaultCounts:
    """What a :class:`FaultProxy` did.

    Attributes
    ----------
    connections : int
        Client connections accepted.
    requests : int
        Requests seen (faulted or not).
    reset_before, reset_after, drop, stall : int
        Requests that met each fault.
    """

    connections: int = 0
    requests: int = 0
    reset_before: int = 0
    reset_after: int = 0
    drop: int = 0
    stall: int = 0

    @property
    def faults(self) -> int:
        """Requests that met any fault."""
        return self.reset_before + self.reset_after + self.drop + self.stall


@dataclass(frozen=True)
class FaultedRequest:
    """One faulted request: its request line and the fault it met."""

    line: str
    action: FaultAction


def _address(upstream: str | tuple[str, int]) -> tuple[str, int]:
    if isinstance(upstream, tuple):
        return upstream
    parts = urlsplit(upstream if "://" in upstream else f"http://{upstream}")
    if parts.hostname is None or parts.port is None:
        raise ValueError(f"upstream {upstream!r} names no host and port")
    return parts.hostname, parts.port


def _reset(sock: socket.socket) -> None:
    """Close ``sock`` with a TCP RST rather than a FIN."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


@dataclass
class _Shares:
    reset_before: float = 0.0
    reset_after: float = 0.0
    drop: float = 0.0
    stall: float = 0.0
    match: bytes = b""

    def draw(self, rng: random.Random, line: bytes) -> FaultAction | None:
        if self.match not in line:
            return None
        u = rng.random()
        for action in ACTIONS:
            share: float = getattr(self, action)
            if u < share:
                return action
            u -= share
        return None


@dataclass
class _State:
    shares: _Shares = field(default_factory=_Shares)
    rules: list[FaultRule] = field(default_factory=list)
    counts: FaultCounts = field(default_factory=FaultCounts)
    log: list[FaultedRequest] = field(default_factory=list)


class FaultProxy:
    """A threaded TCP proxy on ``127.0.0.1`` that resets, drops or stalls a share of requests.

    Parameters
    ----------
    upstream : str or (str, int)
        The server to forward to: ``"http://127.0.0.1:5000"``, ``"host:port"``
        or ``(host, port)``.
    seed : int
        Seed of the random draws that pick faulted requests.
    reset_before, reset_after, drop, stall : float
        Share of requests (each in [0, 1], together at most 1) that meet
        each fault (see the module docstring).
    stall_seconds : float
        How long a stalled response is held back.
    drop_seconds : float
        Longest time a dropped request's connection is kept open and silent
        before it is reset (the client usually gives up first).
    match : bytes
        Only requests whose request line contains this are eligible for the
        random faults (rules added with :meth:`add_rule` apply regardless).
    port : int
        Port to listen on; 0 picks a free one (see :attr:`url`).

    Examples
    --------
    >>> with FaultProxy("http://127.0.0.1:5000", reset_after=0.2) as proxy:  # doctest: +SKIP
    ...     storage_options = {"client_kwargs": {"endpoint_url": proxy.url}}
    """

    def __init__(
        self,
        upstream: str | tuple[str, int],
        *,
        seed: int = 0,
        reset_before: float = 0.0,
        reset_after: float = 0.0,
        drop: float = 0.0,
        stall: float = 0.0,
        stall_seconds: float = 1.0,
        drop_seconds: float = 60.0,
        match: bytes = b"",
        port: int = 0,
    ) -> None:
        self.upstream = _address(upstream)
        self.stall_seconds = stall_seconds
        self.drop_seconds = drop_seconds
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._state = _State()
        self.configure(
            reset_before=reset_before, reset_after=reset_after, drop=drop, stall=stall, match=match
        )
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", port))
        self._listener.listen(128)
        self._listener.settimeout(_POLL)
        self.port: int = self._listener.getsockname()[1]
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._acceptor: threading.Thread | None = None

    # -- configuration --------------------------------------------------------
    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``: the endpoint clients should use."""
        return f"http://127.0.0.1:{self.port}"

    def configure(
        self,
        *,
        reset_before: float = 0.0,
        reset_after: float = 0.0,
        drop: float = 0.0,
        stall: float = 0.0,
        match: bytes = b"",
    ) -> None:
        """Set the shares of requests that meet each fault (all 0: a faithful proxy)."""
        shares = _Shares(reset_before, reset_after, drop, stall, match)
        values = [reset_before, reset_after, drop, stall]
        if any(not 0.0 <= v <= 1.0 for v in values) or sum(values) > 1.0:
            raise ValueError(f"fault shares must lie in [0, 1] and add up to at most 1: {values}")
        with self._lock:
            self._state.shares = shares

    def add_rule(
        self, action: FaultAction, match: bytes = b"", count: int = 1, *, method: bytes = b""
    ) -> None:
        """Fault the next ``count`` requests whose request line contains ``match``.

        ``method`` restricts the rule to one HTTP method (``b"POST"``). Rules
        are tried in the order they were added, before the random draw.
        """
        if action not in ACTIONS:
            raise ValueError(f"unknown fault {action!r}; choose one of {ACTIONS}")
        if count < 1:
            raise ValueError(f"a rule must fault at least one request, not {count}")
        with self._lock:
            self._state.rules.append(FaultRule(action, match, count, method))

    @property
    def counts(self) -> FaultCounts:
        """A snapshot of the counters."""
        with self._lock:
            return replace(self._state.counts)

    @property
    def log(self) -> list[FaultedRequest]:
        """The faulted requests so far, in order."""
        with self._lock:
            return list(self._state.log)

    def pending_rules(self) -> list[FaultRule]:
        """Rules not yet used up."""
        with self._lock:
            return list(self._state.rules)

    # -- running --------------------------------------------------------------
    def start(self) -> FaultProxy:
        """Start accepting connections (in a daemon thread); return the proxy."""
        if self._acceptor is None:
            self._acceptor = threading.Thread(
                target=self._accept, name=f"fault-proxy-{self.port}", daemon=True
            )
            self._acceptor.start()
        return self

    def stop(self) -> None:
        """Stop accepting, end every connection and wait for the threads (a few seconds)."""
        self._stop.set()
        if self._acceptor is not None:
            self._acceptor.join(5)
        self._listener.close()
        for thread in list(self._threads):
            thread.join(5)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self._state.counts.connections += 1
                self._threads = [t for t in self._threads if t.is_alive()]
            thread = threading.Thread(target=self._serve, args=(client,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _decide(self, head: bytes) -> FaultAction | None:
        line = request_line(head)
        with self._lock:
            state = self._state
            state.counts.requests += 1
            action: FaultAction | None = None
            for i, rule in enumerate(state.rules):
                if rule.matches(line):
                    action = rule.action
                    if rule.count > 1:
                        state.rules[i] = replace(rule, count=rule.count - 1)
                    else:
                        del state.rules[i]
                    break
            else:
                action = state.shares.draw(self._rng, line)
            if action is not None:
                setattr(state.counts, action, getattr(state.counts, action) + 1)
                state.log.append(FaultedRequest(line.decode("latin-1"), action))
            return action

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.upstream, timeout=5)
        except OSError:
            _reset(client)
            return
        try:
            _Connection(self, client, upstream).run()
        finally:
            for sock in (client, upstream):
                if sock.fileno() >= 0:
                    sock.close()


class _Connection:
    """One proxied client connection and its upstream connection."""

    def __init__(self, proxy: FaultProxy, client: socket.socket, upstream: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.upstream = upstream
        self.framer = RequestFramer()
        self.action: FaultAction | None = None  # the fault of the request under way
        self.request_sent = False  # its body has gone upstream: the next bytes back answer it

    def run(self) -> None:
        for sock in (self.client, self.upstream):
            sock.setblocking(True)
            sock.settimeout(None)
        with selectors.DefaultSelector() as selector:
            selector.register(self.client, selectors.EVENT_READ, "client")
            selector.register(self.upstream, selectors.EVENT_READ, "upstream")
            while not self.proxy._stop.is_set():
                for key, _ in selector.select(_POLL):
                    source = self.client if key.data == "client" else self.upstream
                    try:
                        data = source.recv(_BUFSIZE)
                    except OSError:
                        return
                    if not data:
                        return
                    try:
                        ok = (
                            self._from_client(data)
                            if key.data == "client"
                            else self._from_server(data)
                        )
                    except OSError:  # the other side is gone (reset, closed)
                        return
                    if not ok:
                        return

    def _from_client(self, data: bytes) -> bool:
        for event, chunk in self.framer.feed(data):
            if event == "head":
                self.action = self.proxy._decide(chunk)
                self.request_sent = False
                if self.action == "reset_before":
                    _reset(self.client)
                    return False
            if chunk:
                self.upstream.sendall(chunk)
            if event == "end":
                self.request_sent = True
        return True

    def _from_server(self, data: bytes) -> bool:
        # an interim "100 Continue" goes through: the faults are for the final answer
        interim, data = split_continue(data)
        if interim:
            self.client.sendall(interim)
            if not data:
                return True
        action = self.action if self.request_sent else None
        if action is None:
            self.client.sendall(data)
            return True
        self.action = None
        if action == "reset_after":
            _reset(self.client)
            return False
        if action == "drop":
            self.upstream.close()
            self._hold_silent()
            _reset(self.client)
            return False
        # stall: hold the response back, then deliver it and carry on
        deadline = time.monotonic() + self.proxy.stall_seconds
        while not self.proxy._stop.is_set() and time.monotonic() < deadline:
            time.sleep(min(_POLL, max(0.0, deadline - time.monotonic())))
        try:
            self.client.sendall(data)
        except OSError:
            return False  # the client gave up meanwhile
        return True

    def _hold_silent(self) -> None:
        """Keep the client's connection open, answering nothing, until it closes or time is up."""
        deadline = time.monotonic() + self.proxy.drop_seconds
        self.client.settimeout(_POLL)
        while not self.proxy._stop.is_set() and time.monotonic() < deadline:
            try:
                if not self.client.recv(_BUFSIZE):
                    return
            except TimeoutError:
                continue
            except OSError:
                return
