"""One streamed engine response: its pieces (SSE events for OpenAI-style engines, NDJSON lines
for Ollama) split out of the body as the bytes arrive, pulled by the reader's task or pushed from
the connection's callback; and the two timeouts of a stream (`base.Timeouts`):

- first_byte: from sending until the headers *and* the first body line arrived (the engine's
  queue and the prompt's prefill);
- idle:       the longest silence between two lines after that. A stream is never bounded by
              its length: a generation of many minutes runs to its end while lines keep coming
              (keep-alive comments count), and one whose engine goes silent ends.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

import orjson

from mindrouter.backends.base import Timeouts
from mindrouter.backends.failures import CLIENT_FAILURES, error_from_exception, error_from_status
from mindrouter.backends.http_client import ConnectionPool, EngineConnection, MalformedResponse
from mindrouter.errors import UpstreamTimeout
from mindrouter.tasks import Alarm

# A single stream line can be large (a whole Ollama tool call, a final line with metrics).
MAX_LINE = 16 * 1024 * 1024
# How long to wait for the end of a body after the stream's end marker before giving up on
# reusing the connection.
DRAIN_SECONDS = 0.1
# Line feed and carriage return as byte values. `int in bytes` is a plain scan, where
# `b"\n" in bytes` first tries the needle as an integer and, on CPython 3.11, builds and drops
# a TypeError every time (about 2,000 instructions, several times for every event).
_LF = 0x0A
_CR = 0x0D


class UpstreamStream:
    """One streamed response. Leaving the block early closes the connection (not pooled), so the
    engine sees the disconnect and stops generating; reading to the end returns it to the pool.

    Events (SSE) and lines (NDJSON) are split out of the bytes as they arrive, in a buffer of our
    own: one read of the body per piece the engine sends, and every whole event or line in the
    buffer taken in one pass, with no timeout to set up for what is already there. The idle
    timeout is one timer per stream (`_watch`), which looks at how long the event or line under
    way has been waited for, instead of a timeout around every read.
    """

    __slots__ = (
        "_backend",
        "_body",
        "_buf",
        "_conn",
        "_finished",
        "_loop",
        "_model",
        "_opening",
        "_path",
        "_pool",
        "_reading",
        "_since",
        "_timeouts",
        "_watchdog",
    )

    def __init__(
        self,
        pool: ConnectionPool,
        timeouts: Timeouts,
        backend: str,
        path: str,
        body: Mapping[str, Any],
        model: str,
    ) -> None:
        self._pool = pool
        self._timeouts = timeouts
        self._backend = backend
        self._path = path
        self._body = body
        self._model = model
        self._conn: EngineConnection | None = None
        self._finished = False
        self._buf = b""  # bytes received and not yet taken
        self._opening = False  # the request is sent and its first line not yet here
        self._reading = False  # an event or a line is being waited for
        self._since = 0.0  # since when
        self._watchdog = Alarm()
        # Looked up once: asyncio's lookup asks the kernel for the process id every time.
        self._loop: asyncio.AbstractEventLoop | None = None

    async def __aenter__(self) -> UpstreamStream:
        pool, timeouts, backend = self._pool, self._timeouts, self._backend
        try:
            conn = await pool.acquire()  # a new connection is bounded by the connect timeout
        except CLIENT_FAILURES as exc:
            raise error_from_exception(exc, backend, f"opening the stream at {self._path}") from exc
        self._conn = conn
        self._loop = loop = asyncio.get_running_loop()
        # One timer for the whole stream (`_watch`): first the first byte's deadline, then the
        # idle one. An `asyncio.timeout` around the opening cost three times a timer.
        self._since = sent = loop.time()
        self._opening = self._reading = True
        self._watchdog.arm(sent + timeouts.first_byte, self._watch)
        raw = b""
        try:
            payload = orjson.dumps(self._body)
            conn.send(pool.request_head(self._path, len(payload)), payload)
            status = await conn.head()
            if status >= 400:
                raw = await conn.read_all()
            else:
                # The first whole line (or the end of the body) within the deadline.
                while _LF not in self._buf and await self._append(conn):
                    pass
        except BaseException as exc:
            self._watchdog.cancel()
            self._conn = None
            conn.close()
            if isinstance(exc, CLIENT_FAILURES):
                stage = f"opening the stream at {self._path}"
                raise error_from_exception(exc, backend, stage) from exc
            raise
        self._opening = self._reading = False
        if status >= 400:
            self._watchdog.cancel()
            self._conn = None
            pool.release(conn)  # the body was read whole: the connection can be reused
            raise error_from_status(status, raw, self._model, backend)
        # From here the idle deadline (moved earlier, should it come before the first byte's).
        self._watchdog.arm(loop.time() + timeouts.idle, self._watch)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._watchdog.cancel()
        conn = self._conn
        if conn is None:
            return
        if self._finished and exc_type is None:
            self._pool.release(conn)
        else:
            conn.close()

    def _watch(self, now: float) -> float | None:
        """The stream's timer. While it opens: the first byte's deadline has passed, which fails
        it. Then: a line that has been waited for `idle` seconds fails the read; otherwise it
        looks again when the wait under way (or the next one) would have lasted that long."""
        conn, timeouts, backend = self._conn, self._timeouts, self._backend
        if conn is None:
            return None
        if self._opening:
            if now < self._since + timeouts.first_byte:
                return self._since + timeouts.first_byte
            conn.fail(
                UpstreamTimeout(
                    f"{backend}: no first byte within {timeouts.first_byte:g} s", backend
                )
            )
            return None
        idle = timeouts.idle
        if self._reading and now - self._since >= idle:
            conn.fail(UpstreamTimeout(f"{backend}: the stream went silent for {idle:g} s", backend))
            return None
        return (self._since if self._reading else now) + idle

    async def _append(self, conn: EngineConnection) -> bool:
        """Adds the next bytes of the body to the buffer; False at the end of the body."""
        data = await conn.read()
        if not data:
            return False
        self._add(data)
        return True

    def _add(self, data: bytes) -> None:
        self._buf = self._buf + data if self._buf else data
        if len(self._buf) > MAX_LINE and _LF not in data:
            raise MalformedResponse(f"a line longer than {MAX_LINE} bytes")

    async def finish(self) -> None:
        """Read what is left of the body (after the protocol's end marker that is normally just
        the end of the chunked encoding) so the connection can go back to the pool. A body that
        does not end promptly is not waited for: the connection is closed instead."""
        conn = self._conn
        assert conn is not None
        self._watchdog.cancel()
        try:
            if conn.complete and conn.error is None:
                conn.take()  # the usual case: the body has ended, nothing to wait for
            else:
                async with asyncio.timeout(DRAIN_SECONDS):
                    while await conn.read():
                        pass
        except CLIENT_FAILURES:
            return
        self._finished = True

    async def next_sse_events(self) -> list[bytes] | None:
        """The data of every server-sent event that has arrived whole, at least one (waited
        for); None at the end of the body.

        Comment lines (`:` keep-alives) and fields other than `data` are skipped, and count as
        signs of life; several `data` lines in one event are joined with a newline, as the SSE
        specification says. A last event the body ended without a blank line after is kept.
        """
        return await self._next(self._sse_events, b"\n\n")

    async def next_json_lines(self) -> list[bytes] | None:
        """Every NDJSON line that has arrived whole (not yet decoded: `load_stream_json`), at
        least one (waited for); None at the end of the body. Blank lines are skipped."""
        return await self._next(self._json_lines, b"\n")

    async def _next(
        self, take: Callable[[], tuple[list[bytes], int]], end: bytes
    ) -> list[bytes] | None:
        """What `take` finds whole in the buffer, reading more of the body until it finds
        something. `take` answers the pieces found and how many units (lines, events,
        comments) it consumed: any unit is a sign of life for the idle timer, while bytes
        trickled without completing one are not. At the end of the body, what is left is taken
        as if `end` followed it.
        """
        pieces, _ = take()
        if pieces:
            return pieces
        conn, loop = self._conn, self._loop
        assert conn is not None and loop is not None
        self._since = loop.time()
        self._reading = True
        try:
            while await self._append(conn):
                pieces, units = take()
                if pieces:
                    return pieces
                if units:
                    self._since = loop.time()
        except CLIENT_FAILURES as exc:
            raise error_from_exception(exc, self._backend, "reading the stream") from exc
        finally:
            self._reading = False
        if not self._buf:
            return None
        self._buf += end
        pieces, _ = take()
        self._buf = b""
        return pieces or None

    async def push_sse_events(self, handle: Callable[[list[bytes]], bool]) -> None:
        """Hands the data of every whole server-sent event to `handle` as the bytes arrive,
        inside the connection's callback, with no task woken per read; returns once `handle`
        answers False (after taking the batch it was given), or the body ends or fails, and
        then the pulling methods go on from there (they report the end or the failure).
        An exception `handle` raises is raised here."""
        await self._push(self._sse_events, handle)

    async def push_json_lines(self, handle: Callable[[list[bytes]], bool]) -> None:
        """`push_sse_events` for NDJSON lines."""
        await self._push(self._json_lines, handle)

    async def _push(
        self, take: Callable[[], tuple[list[bytes], int]], handle: Callable[[list[bytes]], bool]
    ) -> None:
        conn, loop = self._conn, self._loop
        assert conn is not None and loop is not None
        over: asyncio.Future[None] = loop.create_future()

        # Runs in the connection's callback, in the context variables of whichever request
        # opened the connection (it is pooled), not this one's: nothing on this path may rely
        # on them (the request's log fields among them).
        def received() -> None:
            if over.done():
                return
            try:
                if data := conn.take():
                    self._add(data)
                    pieces, units = take()
                    if units:
                        self._since = loop.time()
                    if pieces and not handle(pieces):
                        over.set_result(None)
                        return
                if conn.complete or conn.error is not None:
                    over.set_result(None)
            except Exception as exc:  # raised in the task that pushes
                over.set_exception(exc)

        self._since = loop.time()
        self._reading = True
        conn.listener = received
        try:
            pieces, _ = take()  # what is already here first
            if not pieces or handle(pieces):
                received()
                await over
        except MalformedResponse as exc:
            raise error_from_exception(exc, self._backend, "reading the stream") from exc
        finally:
            conn.listener = None
            self._reading = False

    def _sse_events(self) -> tuple[list[bytes], int]:
        rest = self._buf
        if _CR in rest:
            rest = rest.replace(b"\r\n", b"\n")
        *blocks, self._buf = rest.split(b"\n\n")
        return [data for block in blocks if (data := _event_data(block)) is not None], len(blocks)

    def _json_lines(self) -> tuple[list[bytes], int]:
        *lines, self._buf = self._buf.split(b"\n")
        return [line for line in lines if line.strip()], len(lines)


def _event_data(block: bytes) -> bytes | None:
    """The data of one event's lines (no blank line among them), None when it has none."""
    if block.startswith(b"data: ") and _LF not in block:
        return block[6:]  # the common shape: one data line
    data: bytes | None = None
    for line in block.split(b"\n"):
        if line.startswith(b"data:"):
            chunk = line[6:] if line[5:6] == b" " else line[5:]
            data = chunk if data is None else data + b"\n" + chunk
    return data
