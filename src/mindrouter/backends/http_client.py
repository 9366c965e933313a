"""HTTP/1.1 connections to one engine: an asyncio protocol per socket whose responses httptools
(llhttp, the parser uvicorn uses) decodes, and the keep-alive pool they return to.

A general client puts each piece of a body through a stream reader, a payload parser and a
future or two; a relayed chunk is one such piece, thousands a second. Here a piece goes from
`data_received` through the parser into a list the reader takes whole, and the reader's future
is made only when it has to wait. What this client does not need is not there: no redirects, no
cookies, no proxies, no compression (nothing asks for it, so engines answer in plain bytes), no
request pipelining.

The failures it raises are the standard ones, with names `failures.error_from_exception` reads:
`ConnectTimeout` (a `TimeoutError`), `CannotConnect` (an `OSError`), `ConnectionDropped` (a
`ConnectionError`), `MalformedResponse` (a `ValueError`).
"""

from __future__ import annotations

import asyncio
import functools
import socket
import ssl
import time
from collections import deque
from collections.abc import Callable
from typing import cast
from urllib.parse import urlsplit

import httptools

# Below the 5 s idle timeout of uvicorn (vLLM) and cpp-httplib (llama.cpp), so that a pooled
# connection is never one the server is about to close.
KEEPALIVE_SECONDS = 4.0
# A response's status line and headers; engines send a few hundred bytes.
MAX_HEAD = 64 * 1024
# Body bytes received and not yet read above which the socket is no longer read.
HIGH_WATER = 1024 * 1024
# Name lookups are kept this long (a new connection is made for every stream cut short).
DNS_SECONDS = 300.0


class ConnectTimeout(TimeoutError):
    pass


class CannotConnect(OSError):
    pass


class ConnectionDropped(ConnectionError):
    pass


class MalformedResponse(ValueError):
    pass


class EngineConnection(asyncio.Protocol):
    """One socket to the engine and the response under way on it."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.status = 0
        self.closed = False
        self.idle_since = 0.0
        # Called after every read of the socket and at the response's end or failure, in the
        # loop's callback: a stream relayed without a task waiting (`UpstreamStream.push`).
        self.listener: Callable[[], None] | None = None
        self._reset()

    def _reset(self) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self._head_bytes = 0  # the headers parsed
        self._received = 0  # the bytes received while the head was not complete
        self._framed = False  # a length or chunks: the body ends by itself, not at the close
        self.headers_done = False
        self.complete = False
        self.keep_alive = False
        self.error: BaseException | None = None
        self._pieces: list[bytes] = []
        self._buffered = 0
        self._paused = False
        self._waiter: asyncio.Future[None] | None = None

    # -- the request

    def send(self, head: bytes, body: bytes) -> None:
        """Starts a request on an idle connection."""
        assert self.transport is not None
        self._reset()
        self.transport.write(head + body)

    # -- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports have the methods of `asyncio.Transport` without deriving from it.
        self.transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            # A request is one write and a chunk one small read: none may wait for an ACK.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        if self.complete or self.error is not None:
            # Bytes beyond the response (or on an idle connection): it cannot be trusted again.
            self.fail(MalformedResponse("bytes after the end of the response"))
            return
        head_so_far = 0 if self.headers_done else self._received + len(data)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.fail(MalformedResponse(f"not a valid HTTP response ({exc})"))
            return
        # Counted twice over: the bytes of a head still under way, the headers of one parsed.
        self._received = head_so_far
        if max(self._head_bytes, 0 if self.headers_done else head_so_far) > MAX_HEAD:
            self.fail(MalformedResponse(f"response headers longer than {MAX_HEAD} bytes"))
            return
        if self._buffered > HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self.complete and self.error is None:
            if self.headers_done and not self._framed:
                self.complete = True  # a body delimited by the end of the connection
            else:
                self.error = ConnectionDropped("the engine closed the connection")
        self._wake()

    # -- httptools callbacks

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_bytes += len(name) + len(value)
        lowered = name.lower()
        if lowered == b"content-length" or (
            lowered == b"transfer-encoding" and b"chunked" in value.lower()
        ):
            self._framed = True

    def on_headers_complete(self) -> None:
        self.status = self._parser.get_status_code()
        self.keep_alive = self._parser.should_keep_alive()
        self.headers_done = True

    def on_body(self, body: bytes) -> None:
        self._pieces.append(body)
        self._buffered += len(body)

    def on_message_complete(self) -> None:
        self.complete = True

    # -- reading

    def fail(self, error: BaseException) -> None:
        """Ends the response with `error` (a reader waiting gets it) and closes the socket."""
        if self.error is None:
            self.error = error
        self.close()
        self._wake()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    @property
    def reusable(self) -> bool:
        return self.complete and self.keep_alive and self.error is None and not self.closed

    async def head(self) -> int:
        """Waits for the status line and headers; the status."""
        while not self.headers_done:
            if self.error is not None:
                raise self.error
            await self._wait()
        return self.status

    def take(self) -> bytes:
        """The body bytes that arrived since the last read, without waiting (b"" when none)."""
        pieces = self._pieces
        if not pieces:
            return b""
        data = pieces[0] if len(pieces) == 1 else b"".join(pieces)
        self._pieces = []
        self._buffered = 0
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return data

    async def read(self) -> bytes:
        """The body bytes that arrived since the last read, waiting for some; b"" at the end."""
        while True:
            if data := self.take():
                return data
            if self.error is not None:
                raise self.error
            if self.complete:
                return b""
            await self._wait()

    async def read_all(self) -> bytes:
        parts = []
        while data := await self.read():
            parts.append(data)
        return b"".join(parts)

    async def _wait(self) -> None:
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        try:
            await waiter
        finally:
            self._waiter = None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        if self.listener is not None:
            self.listener()


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The system's trust store and checks (`SSL_CERT_FILE` and `SSL_CERT_DIR` name others),
    made once: a context costs milliseconds."""
    return ssl.create_default_context()


class ConnectionPool:
    """The connections to one engine (`root`: scheme, host, port and a path prefix), kept alive
    between requests for `KEEPALIVE_SECONDS`. Bound to the loop it is first used on: a new loop
    (tests, a restarted worker) gets a new pool rather than sockets of a dead loop."""

    def __init__(self, root: str, *, connect_timeout: float, headers: dict[str, str]) -> None:
        parts = urlsplit(root)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"an engine URL is http:// or https:// with a host, not {root!r}")
        self.tls = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.tls else 80)
        self.prefix = parts.path.rstrip("/")
        default_port = self.port == (443 if self.tls else 80)
        host_header = f"[{self.host}]" if ":" in self.host else self.host
        if not default_port:
            host_header += f":{self.port}"
        fixed = {"Host": host_header, "Content-Type": "application/json", **headers}
        self._fixed = "".join(f"{k}: {v}\r\n" for k, v in fixed.items()).encode("latin-1")
        self._connect_timeout = connect_timeout
        self._idle: deque[EngineConnection] = deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._addresses: list[tuple[int, str, int]] = []
        self._resolved_at = 0.0

    def request_head(self, path: str, body_length: int) -> bytes:
        return b"POST %s HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n" % (
            (self.prefix + path).encode("latin-1"),
            self._fixed,
            body_length,
        )

    async def acquire(self) -> EngineConnection:
        """An idle connection that is still open, else a new one."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._idle.clear()
            self._loop = loop
        now = loop.time()
        idle = self._idle
        while idle:
            conn = idle.pop()
            if not conn.closed and now - conn.idle_since < KEEPALIVE_SECONDS:
                return conn
            conn.close()
        return await self._connect(loop)

    def release(self, conn: EngineConnection) -> None:
        """After a response read to its end: back to the pool if it may carry another."""
        if conn.reusable and self._loop is not None:
            conn.idle_since = self._loop.time()
            self._idle.append(conn)
        else:
            conn.close()

    def close(self) -> None:
        while self._idle:
            self._idle.pop().close()

    async def _connect(self, loop: asyncio.AbstractEventLoop) -> EngineConnection:
        try:
            async with asyncio.timeout(self._connect_timeout):
                addresses = await self._resolve(loop)
                failure: OSError | None = None
                for at, (family, address, port) in enumerate(addresses):
                    try:
                        _, conn = await loop.create_connection(
                            EngineConnection,
                            address,
                            port,
                            family=family,
                            ssl=tls_context() if self.tls else None,
                            server_hostname=self.host if self.tls else None,
                        )
                        if at:  # the address that answered is tried first from now on
                            addresses.insert(0, addresses.pop(at))
                        return conn
                    except OSError as exc:
                        failure = exc
        except TimeoutError:
            raise ConnectTimeout(f"no connection within {self._connect_timeout:g} s") from None
        raise CannotConnect(str(failure) if failure else f"no address for {self.host}")

    async def _resolve(self, loop: asyncio.AbstractEventLoop) -> list[tuple[int, str, int]]:
        if self._addresses and time.monotonic() - self._resolved_at < DNS_SECONDS:
            return self._addresses
        try:
            infos = await loop.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            raise CannotConnect(f"cannot resolve {self.host}: {exc}") from exc
        self._addresses = [(f, str(a[0]), int(a[1])) for f, _, _, _, a in infos]
        self._resolved_at = time.monotonic()
        return self._addresses
