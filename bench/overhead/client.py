"""The load client: raw HTTP/1.1 over asyncio protocols with httptools, kept cheap on purpose.

It shares a core with the mock backend, so every microsecond it spends is one the measurement
could be late by. A `Pool` keeps keep-alive connections to one server; a request takes an idle
connection or opens a new one, so an open-loop schedule is never held back by a connection limit.

Timing is on `time.monotonic()` (CLOCK_MONOTONIC, shared with the mock's process):
- open loop: request i is due at t0 + i/rate and its latency counts from that due time, not from
  when it was actually sent, so a late client or a stalled server shows up in the figures
  (no coordinated omission);
- streams: the arrival of every SSE event that carries content, and of the reads they came in.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import cast

import httptools

CONTENT = b'"content":"'


@dataclass(slots=True)
class Result:
    due: float  # the intended send time
    sent: float = 0.0
    done: float = 0.0
    status: int = 0
    error: str | None = None
    body_bytes: int = 0
    # Streams only.
    events: list[float] = field(default_factory=list)  # arrival of each content event
    reads: int = 0  # socket reads that delivered at least one content event
    cancelled_at: float | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.status == 200

    @property
    def latency(self) -> float:
        return self.done - self.due


class _Conn(asyncio.Protocol):
    __slots__ = (
        "_buf",
        "_cancel_after",
        "_future",
        "_keep",
        "_result",
        "_stream",
        "lost",
        "parser",
        "transport",
    )

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self._future: asyncio.Future[None] | None = None
        self._result: Result | None = None
        self._stream = False
        self._cancel_after = 0
        self._buf = b""
        self._keep = True
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport, but behave as one.
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        f = self._future
        if f is not None and not f.done():
            r = self._result
            if r is not None and r.cancelled_at is None:
                r.error = f"connection lost: {exc!r}" if exc else "connection closed"
            f.set_result(None)

    def request(
        self, raw: bytes, result: Result, stream: bool, cancel_after: int
    ) -> asyncio.Future[None]:
        assert self.transport is not None
        self._future = asyncio.get_running_loop().create_future()
        self._result = result
        self._stream = stream
        self._cancel_after = cancel_after
        self._buf = b""
        self.parser = httptools.HttpResponseParser(self)
        result.sent = time.monotonic()
        self.transport.write(raw)
        return self._future

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            r = self._result
            if r is not None:
                r.error = f"bad response: {exc}"
            self._finish(keep=False)

    def on_headers_complete(self) -> None:
        r = self._result
        if r is not None:
            r.status = self.parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        r = self._result
        if r is None:
            return
        r.body_bytes += len(body)
        if not self._stream:
            return
        now = time.monotonic()
        buf = self._buf + body
        start = 0
        got = 0
        while True:
            end = buf.find(b"\n\n", start)
            if end < 0:
                break
            at = buf.find(CONTENT, start, end)
            if at >= 0 and buf[at + len(CONTENT) : at + len(CONTENT) + 1] != b'"':
                r.events.append(now)
                got += 1
            start = end + 2
        self._buf = buf[start:]
        if got:
            r.reads += 1
            if self._cancel_after and len(r.events) >= self._cancel_after:
                r.cancelled_at = time.monotonic()
                r.done = r.cancelled_at
                self._finish(keep=False)

    def on_message_complete(self) -> None:
        self._finish(keep=self.parser.should_keep_alive())

    def _finish(self, keep: bool) -> None:
        r = self._result
        f = self._future
        self._result = None
        self._future = None
        if r is not None and not r.done:
            r.done = time.monotonic()
        if not keep and self.transport is not None:
            # A plain close (FIN), as a client that goes away sends.
            self.transport.close()
            self.lost = True
        if f is not None and not f.done():
            f.set_result(None)


class Pool:
    """Keep-alive connections to one server; grows on demand."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self._idle: list[_Conn] = []
        self.opened = 0

    async def _connect(self) -> _Conn:
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(_Conn, self.host, self.port)
        self.opened += 1
        return conn

    async def send(
        self,
        raw: bytes,
        result: Result,
        *,
        stream: bool = False,
        cancel_after: int = 0,
        timeout: float = 10.0,
    ) -> Result:
        conn: _Conn | None = None
        try:
            async with asyncio.timeout(timeout):
                while self._idle:
                    candidate = self._idle.pop()
                    if not candidate.lost:
                        conn = candidate
                        break
                if conn is None:
                    conn = await self._connect()
                await conn.request(raw, result, stream, cancel_after)
        except TimeoutError:
            result.error = "timeout"
        except OSError as exc:
            result.error = f"connect: {exc}"
        if not result.done:
            result.done = time.monotonic()
        if conn is not None:
            if result.error is None and not conn.lost and result.cancelled_at is None:
                self._idle.append(conn)
            elif conn.transport is not None:
                conn.transport.abort()
        return result

    def close(self) -> None:
        for conn in self._idle:
            if conn.transport is not None:
                conn.transport.close()
        self._idle.clear()


def post(host: str, port: int, path: str, body: bytes, headers: dict[str, str]) -> bytes:
    """A complete HTTP/1.1 POST as bytes, built once and sent many times."""
    lines = [f"POST {path} HTTP/1.1", f"host: {host}:{port}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    lines += ["content-type: application/json", f"content-length: {len(body)}", "", ""]
    return "\r\n".join(lines).encode() + body


async def open_loop(
    pool: Pool,
    raw: bytes | Callable[[int], bytes],
    rate: float,
    duration: float,
    *,
    stream: bool = False,
    cancel_after: int = 0,
    timeout: float = 10.0,
) -> tuple[list[Result], float]:
    """Sends round(rate * duration) requests on a fixed schedule; returns them and t0."""
    n = max(1, round(rate * duration))
    interval = 1.0 / rate
    t0 = time.monotonic() + 0.01
    tasks: list[asyncio.Task[Result]] = []
    i = 0
    while i < n:
        now = time.monotonic()
        due = t0 + i * interval
        if due > now:
            await asyncio.sleep(due - now)
            continue
        # Everything already due goes out now: a late wake-up sends a burst, as a real open
        # population would, and each request still counts from its own due time.
        while i < n and t0 + i * interval <= now:
            body = raw(i) if callable(raw) else raw
            r = Result(due=t0 + i * interval)
            tasks.append(
                asyncio.ensure_future(
                    pool.send(body, r, stream=stream, cancel_after=cancel_after, timeout=timeout)
                )
            )
            i += 1
    results = await asyncio.gather(*tasks)
    return list(results), t0


async def closed_loop(
    pool: Pool,
    raw: bytes,
    concurrency: int,
    duration: float,
    *,
    stream: bool = False,
    timeout: float = 30.0,
    spread: float | None = None,
) -> tuple[list[Result], float]:
    """`concurrency` workers, each sending its next request when the last one ends; their
    first requests go out evenly over `spread` seconds (0.05, or 0.2 for streams). Workers
    whose requests all take the same time keep that phase: streams started within 0.2 s of
    each other end, and start again, within 0.2 s of each other, round after round."""
    t0 = time.monotonic()
    stop = t0 + duration
    out: list[Result] = []

    async def worker(offset: float) -> None:
        # Staggered starts so that streams are not in lock step.
        await asyncio.sleep(offset)
        while time.monotonic() < stop:
            r = Result(due=time.monotonic())
            await pool.send(raw, r, stream=stream, timeout=timeout)
            out.append(r)
            if not r.ok:
                await asyncio.sleep(0.01)

    if spread is None:
        spread = 0.05 if not stream else 0.2
    await asyncio.gather(*(worker(spread * k / concurrency) for k in range(concurrency)))
    return out, t0


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1))
    return ordered[k]


async def get(host: str, port: int, path: str, headers: dict[str, str] | None = None) -> bytes:
    """A one-off GET (stats, readiness): the body, or raises."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        writer.write(
            f"GET {path} HTTP/1.1\r\nhost: {host}\r\n{extra}connection: close\r\n\r\n".encode()
        )
        data = await reader.read()
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    if b"transfer-encoding: chunked" in head.lower():
        body = _dechunk(body)
    if status != 200:
        raise RuntimeError(f"GET {path}: {status} {body[:200]!r}")
    return body


async def post_once(host: str, port: int, path: str, body: bytes) -> bytes:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(
            (
                f"POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n"
                f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
            ).encode()
            + body
        )
        data = await reader.read()
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
    return data.partition(b"\r\n\r\n")[2]


def _dechunk(body: bytes) -> bytes:
    out = []
    while body:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out.append(rest[:size])
        body = rest[size + 2 :]
    return b"".join(out)
