"""A tiny scriptable engine server for adapter tests: real HTTP on a loopback port, no mocks.

Each route is an async handler that gets the recorded request and a `Reply` to write with, so a
test can send canned JSON, stream chunks one by one, pause between them, hang, or drop the
connection. The server records every request and the moment it saw a client disconnect
mid-response (a raw ASGI app, so the disconnect comes straight from uvicorn).

It runs on its own thread (one server for the whole session keeps the suite fast), so the
signals a test waits on are `threading.Event`s; handlers wait on the asyncio side.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    raw: bytes
    client: tuple[str, int] | None = None
    disconnected_at: float | None = None
    # Seen from the test's thread, and from handlers on the server's loop.
    disconnected: threading.Event = field(default_factory=threading.Event)
    gone: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def json(self) -> Any:
        return orjson.loads(self.raw) if self.raw else None


class Reply:
    def __init__(self, send: Send) -> None:
        self._send = send
        self.started = False
        self.complete = False

    async def start(self, status: int = 200, content_type: str = "application/json") -> None:
        self.started = True
        headers = [(b"content-type", content_type.encode())]
        await self._send({"type": "http.response.start", "status": status, "headers": headers})

    async def write(self, data: bytes) -> None:
        await self._send({"type": "http.response.body", "body": data, "more_body": True})

    async def end(self, data: bytes = b"") -> None:
        self.complete = True
        await self._send({"type": "http.response.body", "body": data, "more_body": False})

    async def json(self, body: Any, status: int = 200) -> None:
        await self.start(status)
        await self.end(orjson.dumps(body))


Handler = Callable[[Recorded, Reply], Awaitable[None]]


def sse(*events: Any) -> bytes:
    """SSE bytes for the given payloads: dicts become JSON, str/bytes are sent as they are, and
    bytes starting with `:` are written as a comment line."""
    out = []
    for ev in events:
        if isinstance(ev, bytes) and ev.startswith(b":"):
            out.append(ev + b"\n\n")
            continue
        data = (
            ev
            if isinstance(ev, bytes)
            else ev.encode()
            if isinstance(ev, str)
            else orjson.dumps(ev)
        )
        out.append(b"data: " + data + b"\n\n")
    return b"".join(out)


def ndjson(*objs: Any) -> bytes:
    return b"".join(orjson.dumps(o) + b"\n" for o in objs)


class FakeEngine:
    def __init__(self) -> None:
        self.url = ""
        self.routes: dict[str, Handler] = {}
        self.requests: list[Recorded] = []

    def reset(self) -> None:
        self.routes.clear()
        self.requests.clear()

    # Route helpers ---------------------------------------------------------------------------

    def on(self, path: str, handler: Handler) -> None:
        self.routes[path] = handler

    def json(self, path: str, body: Any, status: int = 200) -> None:
        async def handler(req: Recorded, reply: Reply) -> None:
            await reply.json(body, status)

        self.on(path, handler)

    def raw(
        self, path: str, body: bytes, status: int = 200, content_type: str = "text/plain"
    ) -> None:
        async def handler(req: Recorded, reply: Reply) -> None:
            await reply.start(status, content_type)
            await reply.end(body)

        self.on(path, handler)

    def stream(
        self, path: str, pieces: Iterable[bytes], content_type: str = "text/event-stream"
    ) -> None:
        """Send each piece as its own write (so boundaries fall where the test put them)."""
        chunks = list(pieces)

        async def handler(req: Recorded, reply: Reply) -> None:
            await reply.start(200, content_type)
            for piece in chunks:
                await reply.write(piece)
                await asyncio.sleep(0)
            await reply.end()

        self.on(path, handler)

    @property
    def last(self) -> Recorded:
        return self.requests[-1]

    # ASGI ------------------------------------------------------------------------------------

    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                if msg["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif msg["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        body = b""
        while True:
            msg = await receive()
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        peer = scope.get("client")
        client = (str(peer[0]), int(peer[1])) if peer else None
        rec = Recorded(scope["method"], scope["path"], headers, body, client)
        self.requests.append(rec)
        reply = Reply(send)
        watcher = asyncio.create_task(self._watch(rec, reply, receive))
        try:
            handler = self.routes.get(scope["path"])
            if handler is None:
                await reply.start(404, "text/plain")
                await reply.end(b"Not Found")
            else:
                await handler(rec, reply)
        except OSError:
            pass  # the client went away; the watcher has recorded when
        finally:
            if reply.complete:
                watcher.cancel()

    @staticmethod
    async def _watch(rec: Recorded, reply: Reply, receive: Receive) -> None:
        msg = await receive()
        if msg["type"] == "http.disconnect" and not reply.complete:
            rec.disconnected_at = time.monotonic()
            rec.disconnected.set()
            rec.gone.set()
