"""What an adapter says to its engine: JSON bodies posted, streams read event by event.

The connections are the gateway's own (`http_client`): kept alive between requests, bodies
out as orjson bytes, streams decoded as the bytes arrive (SSE for OpenAI-style engines, NDJSON
for Ollama); nothing buffers a whole stream.

Timeouts (`base.Timeouts`):
- connect:    the TCP (and TLS) connect;
- first_byte, idle: a stream's (`engine_stream`);
- total:      a call answered in one body (`post_json`: embeddings, token counts), whole.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from mindrouter.backends.base import Timeouts
from mindrouter.backends.engine_stream import UpstreamStream
from mindrouter.backends.failures import (
    CLIENT_FAILURES,
    error_from_exception,
    error_from_status,
    invalid_json,
)
from mindrouter.backends.http_client import ConnectionPool
from mindrouter.canonical import Events, EventSink, StreamEvent

# Timeouts are frozen, so one shared default instance serves every adapter.
DEFAULT_TIMEOUTS = Timeouts()


class Upstream:
    """POSTs JSON to one engine and opens streams from it."""

    def __init__(
        self,
        root: str,
        *,
        timeouts: Timeouts,
        backend: str,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.root = root.rstrip("/")
        self.backend = backend
        self.timeouts = timeouts
        self.pool = ConnectionPool(
            self.root, connect_timeout=timeouts.connect, headers=dict(headers or {})
        )

    async def post_json(self, path: str, body: Mapping[str, Any], model: str) -> dict[str, Any]:
        """POST a JSON body and return the decoded JSON object; raise on any failure."""
        stage = f"calling {path}"
        payload = orjson.dumps(body)
        pool = self.pool
        try:
            async with asyncio.timeout(self.timeouts.total):
                conn = await pool.acquire()
                try:
                    conn.send(pool.request_head(path, len(payload)), payload)
                    status = await conn.head()
                    raw = await conn.read_all()
                except BaseException:
                    conn.close()
                    raise
                pool.release(conn)
        except CLIENT_FAILURES as exc:
            raise error_from_exception(exc, self.backend, stage) from exc
        if status >= 400:
            raise error_from_status(status, raw, model, self.backend)
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise invalid_json(self.backend, stage) from exc
        if not isinstance(data, dict):
            raise invalid_json(self.backend, stage)
        return data

    def stream(self, path: str, body: Mapping[str, Any], model: str) -> UpstreamStream:
        """`async with upstream.stream(...) as s:` then read lines or events from `s`."""
        return UpstreamStream(self.pool, self.timeouts, self.backend, path, body, model)

    async def decoded(
        self,
        path: str,
        body: Mapping[str, Any],
        model: str,
        *,
        lines: bool,
        feed: Callable[[bytes], bool],
        out: list[StreamEvent],
        ending: Callable[[], list[StreamEvent]],
    ) -> Events:
        """The events of one engine stream: each server-sent event's data (NDJSON line, with
        `lines`) is given to `feed`, which puts the events it decodes in `out` and answers
        False at the stream's last piece; once the body is read, what `ending` answers (the
        closing events, or it raises when the stream ended too early). Pulled or pushed
        (`canonical.Events`): a sink sent in is handed the rest of the current read at once,
        then the events of each next read of the engine, up to the ending."""
        d = _Decoding(feed, out)
        async with self.stream(path, body, model) as stream:
            pull, pushed = (
                (stream.next_json_lines, stream.push_json_lines)
                if lines
                else (stream.next_sse_events, stream.push_sse_events)
            )
            while not d.ended:
                if d.sink is not None:
                    # Pushed until the sink wants no more, or the end: then pulled again.
                    await pushed(d.push)
                    d.sink = None
                    continue
                pieces = await pull()
                if pieces is None:
                    break
                for n, piece in enumerate(pieces):
                    d.ended = not feed(piece)
                    while out and d.sink is None:
                        d.sink = yield out.pop(0)
                    if d.sink is not None:
                        # A sink came in: the rest of this read goes to it at once.
                        if not d.push(pieces[n + 1 :]):
                            d.sink = None
                        break
                    if d.ended:
                        break
            await stream.finish()
        for event in ending():
            yield event

    async def aclose(self) -> None:
        self.pool.close()


class _Decoding:
    """One engine stream's decoding state in `Upstream.decoded`: whether its last piece has
    been decoded, and the sink its events go to while they are pushed."""

    __slots__ = ("ended", "feed", "out", "sink")

    def __init__(self, feed: Callable[[bytes], bool], out: list[StreamEvent]) -> None:
        self.feed = feed
        self.out = out
        self.ended = False
        self.sink: EventSink | None = None

    def push(self, pieces: list[bytes]) -> bool:
        """Hands the sink, in one batch, what `out` holds (decoded before the sink came in: the
        rest of a pulled read) and the events of `pieces` up to the stream's last; False once
        the sink wants no more or the stream has ended. The pieces came in one read of the
        engine's socket, so none of their events waits for another."""
        sink, out, feed = self.sink, self.out, self.feed
        assert sink is not None
        more = True
        try:
            for piece in pieces:
                if self.ended:
                    break
                self.ended = not feed(piece)
        finally:
            # What was decoded before a malformed piece is still relayed and charged.
            if out:
                more = sink(out)
                out.clear()
        return more and not self.ended
