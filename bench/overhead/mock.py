"""A mock OpenAI-format engine that is never the bottleneck.

    .venv/bin/python -m bench.overhead.mock --port P [--model NAME]

A raw asyncio protocol (uvloop when installed) with httptools parsing: no framework, no per-request
allocation beyond the parse, so it answers in a few microseconds and leaves the measured time to
whatever sits between the client and it.

- POST /v1/chat/completions: a fixed ~1 KB chat completion with `usage`, at once; with
  `"stream": true`, SSE chunks shaped by the current stream settings (first-token delay, chunk
  count, gap), then a usage chunk and `[DONE]`.
- A streamed request whose messages carry the marker `[whole]` gets the unary reply as a stream,
  at once: the same text and usage as the unary answer, cut into the configured number of
  chunks, written without a first-token delay or gaps. A gateway that serves a non-streamed
  request by opening an engine stream and collecting it (MindRouter does) then waits at the mock
  exactly as long as the direct unary request does, so "added latency" compares like with like.
  The benchmark puts the marker in every non-streamed request it sends.
- GET /v1/models, /health: enough for health probes.
- POST /_config {"first_token_ms", "chunks", "gap_ms"}: the stream shape for later requests.
- GET /_stats: requests served and, per tagged stream, when the mock saw the client go away
  (monotonic clock, comparable across processes on Linux). A stream is tagged by a
  `[tag:ID]` marker in its last message; only tagged streams are recorded.
- POST /_reset: clears the counters.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import time
from itertools import pairwise
from typing import Any, cast

import httptools
import orjson

WORDS = (
    "The gateway forwards this fixed reply so that every byte of time measured belongs to the "
    "path between the client and the engine rather than to generation. "
)
# About 1 KB of JSON in all: the text is most of it.
TEXT = (WORDS * 4)[:760]
TAG = re.compile(rb"\[tag:([A-Za-z0-9_-]+)\]")
WHOLE = b"[whole]"
UNARY_USAGE = {"prompt_tokens": 25, "completion_tokens": 150, "total_tokens": 175}


def completion_body(model: str) -> bytes:
    return orjson.dumps(
        {
            "id": "chatcmpl-mock",
            "object": "chat.completion",
            "created": 1700000000,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": TEXT},
                    "finish_reason": "stop",
                }
            ],
            "usage": UNARY_USAGE,
        }
    )


def _chunk(model: str, delta: dict[str, Any], finish: str | None = None) -> bytes:
    event = {
        "id": "chatcmpl-mock",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + orjson.dumps(event) + b"\n\n"


def _chunked(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def response(status: int, body: bytes, content_type: bytes = b"application/json") -> bytes:
    reason = b"OK" if status == 200 else b"Error"
    return (
        b"HTTP/1.1 %d %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n"
        % (status, reason, content_type, len(body))
        + body
    )


STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
    b"transfer-encoding: chunked\r\n\r\n"
)


class State:
    def __init__(self, model: str) -> None:
        self.model = model
        self.first_token_s = 0.02
        self.chunks = 64
        self.gap_s = 0.01
        self.unary = response(200, completion_body(model))
        self.models = response(
            200,
            orjson.dumps(
                {
                    "object": "list",
                    "data": [{"id": model, "object": "model", "max_model_len": 1_000_000}],
                }
            ),
        )
        self._render()
        self.reset()

    def _render(self) -> None:
        m = self.model
        self.first_chunk = _chunked(_chunk(m, {"role": "assistant", "content": "w0 "}))
        self.word_chunks = [_chunked(_chunk(m, {"content": f"w{i} "})) for i in range(1, 4096)]
        usage = {
            "id": "chatcmpl-mock",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": m,
            "choices": [],
            "usage": {"prompt_tokens": 25, "completion_tokens": 0, "total_tokens": 25},
        }
        self.usage_template = usage
        self.finish = _chunked(_chunk(m, {}, "stop"))
        self.done = _chunked(b"data: [DONE]\n\n") + b"0\r\n\r\n"
        self.render_whole()

    def render_whole(self) -> None:
        """The unary reply as one burst of `chunks` SSE chunks (see the module's docstring)."""
        m, n = self.model, max(1, self.chunks)
        cuts = [len(TEXT) * i // n for i in range(n + 1)]
        parts = [TEXT[a:b] for a, b in pairwise(cuts)]
        body = [_chunked(_chunk(m, {"role": "assistant", "content": parts[0]}))]
        body += [_chunked(_chunk(m, {"content": p})) for p in parts[1:]]
        usage = {**self.usage_template, "usage": UNARY_USAGE}
        body.append(self.finish + _chunked(b"data: " + orjson.dumps(usage) + b"\n\n") + self.done)
        self.whole_stream = STREAM_HEAD + b"".join(body)

    def end_of_stream(self, chunks: int) -> bytes:
        usage = dict(self.usage_template)
        usage["usage"] = {
            "prompt_tokens": 25,
            "completion_tokens": chunks,
            "total_tokens": 25 + chunks,
        }
        return self.finish + _chunked(b"data: " + orjson.dumps(usage) + b"\n\n") + self.done

    def reset(self) -> None:
        self.requests = 0
        self.streams = 0
        self.closed_early: dict[str, float] = {}
        self.connections = 0


class MockProtocol(asyncio.Protocol):
    __slots__ = (
        "_body",
        "_state",
        "_stream",
        "_transport",
        "_url",
        "parser",
    )

    def __init__(self, state: State) -> None:
        self._state = state
        self._transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self._url = b""
        self._body: list[bytes] = []
        self._stream: StreamJob | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport, but behave as one.
        self._transport = cast(asyncio.Transport, transport)
        self._state.connections += 1

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        if self._stream is not None:
            self._stream.abandon()
            self._stream = None

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            if self._transport is not None:
                self._transport.write(response(400, b'{"error":"bad request"}'))
                self._transport.close()

    # httptools callbacks
    def on_message_begin(self) -> None:
        self._url = b""
        self._body = []

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        t = self._transport
        if t is None:
            return
        s = self._state
        method = self.parser.get_method()
        path = self._url.split(b"?", 1)[0]
        if method == b"POST" and path in (b"/v1/chat/completions", b"/chat/completions"):
            s.requests += 1
            body = b"".join(self._body)
            # A cheap look before parsing: most requests are not streams.
            if b'"stream"' in body and orjson.loads(body).get("stream") is True:
                s.streams += 1
                if WHOLE in body:
                    t.write(s.whole_stream)
                    if not self.parser.should_keep_alive():
                        t.close()
                    return
                match = TAG.search(body)
                self._stream = StreamJob(self, t, s, match.group(1).decode() if match else None)
                return
            t.write(s.unary)
        elif method == b"GET" and path in (b"/v1/models", b"/models"):
            t.write(s.models)
        elif method == b"GET" and path == b"/health":
            t.write(response(200, b"{}"))
        elif method == b"POST" and path == b"/_config":
            cfg = orjson.loads(b"".join(self._body) or b"{}")
            s.first_token_s = float(cfg.get("first_token_ms", s.first_token_s * 1000)) / 1000
            s.chunks = int(cfg.get("chunks", s.chunks))
            s.gap_s = float(cfg.get("gap_ms", s.gap_s * 1000)) / 1000
            s.render_whole()
            t.write(response(200, b"{}"))
        elif method == b"GET" and path == b"/_stats":
            stats = {
                "requests": s.requests,
                "streams": s.streams,
                "connections": s.connections,
                "closed_early": s.closed_early,
            }
            t.write(response(200, orjson.dumps(stats)))
        elif method == b"POST" and path == b"/_reset":
            s.reset()
            t.write(response(200, b"{}"))
        else:
            t.write(response(404, b'{"error":"not found"}'))
        if not self.parser.should_keep_alive():
            t.close()

    def stream_finished(self) -> None:
        self._stream = None
        t = self._transport
        if t is not None and not self.parser.should_keep_alive():
            t.close()


class StreamJob:
    """Writes one SSE stream on timers; stops when the client goes away."""

    __slots__ = ("_handle", "_owner", "_sent", "_state", "_tag", "_transport")

    def __init__(
        self, owner: MockProtocol, transport: asyncio.Transport, state: State, tag: str | None
    ) -> None:
        self._owner = owner
        self._transport = transport
        self._state = state
        self._tag = tag
        self._sent = 0
        transport.write(STREAM_HEAD)
        loop = asyncio.get_running_loop()
        self._handle: asyncio.TimerHandle | None = loop.call_later(state.first_token_s, self._next)

    def _next(self) -> None:
        s = self._state
        t = self._transport
        if self._sent == 0:
            t.write(s.first_chunk)
        else:
            t.write(s.word_chunks[(self._sent - 1) % len(s.word_chunks)])
        self._sent += 1
        if self._sent >= s.chunks:
            t.write(s.end_of_stream(self._sent))
            self._handle = None
            self._owner.stream_finished()
            return
        self._handle = asyncio.get_running_loop().call_later(s.gap_s, self._next)

    def abandon(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
            if self._tag is not None:
                self._state.closed_early[self._tag] = time.monotonic()


async def serve(host: str, port: int, model: str) -> None:
    loop = asyncio.get_running_loop()
    state = State(model)
    server = await loop.create_server(
        lambda: MockProtocol(state), host, port, reuse_address=True, backlog=4096
    )
    print(f"mock listening on http://{host}:{port}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model", default="bench-model")
    ns = parser.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(ns.host, ns.port, ns.model))


if __name__ == "__main__":
    main()
