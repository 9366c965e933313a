"""An HTTP exchange with an ASGI app in this process, streamed as the app sends it.

httpx's ASGI transport collects a response whole before returning it, so it can neither read a
stream as it comes nor leave one half way. `Exchange` runs the app on one request as a task:
the body is sent at once, the response's messages are read as they arrive, and `leave()` is
the client hanging up (the app's next `receive()` returns `http.disconnect`, as a server sends
it when the connection closes).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.types import ASGIApp, Message


class Exchange:
    def __init__(
        self, app: ASGIApp, method: str, path: str, body: bytes, headers: dict[str, str]
    ) -> None:
        path, _, query = path.partition("?")
        self.scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": query.encode(),
            "root_path": "",
            "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
            "client": ("127.0.0.1", 40000),
            "server": ("gateway.test", 80),
        }
        self._body = body
        self._body_sent = False
        self._left = asyncio.Event()
        self._hold: bytes | None = None  # a body piece holding this is sent once resumed
        self.held = asyncio.Event()
        self._resume = asyncio.Event()
        self._messages: asyncio.Queue[Message | None] = asyncio.Queue()
        self.status = 0
        self.headers: dict[str, str] = {}
        self.task = asyncio.create_task(self._run(app))

    async def _run(self, app: ASGIApp) -> None:
        try:
            await app(self.scope, self._receive, self._send)
        finally:
            await self._messages.put(None)

    async def _receive(self) -> Message:
        if not self._body_sent:
            self._body_sent = True
            return {"type": "http.request", "body": self._body, "more_body": False}
        await self._left.wait()
        return {"type": "http.disconnect"}

    async def _send(self, message: Message) -> None:
        hold = self._hold
        if hold is not None and hold in message.get("body", b""):
            self.held.set()
            await self._resume.wait()
        await self._messages.put(message)

    def hold_at(self, marker: bytes) -> None:
        """The app's send of the body piece that holds `marker` waits until `resume()`: what
        the app has done by the time its client could read that piece, and not after."""
        self._hold = marker

    def resume(self) -> None:
        self._resume.set()

    async def _next(self) -> Message | None:
        message = await self._messages.get()
        if message is None:
            await self.task  # the app failed: raise what it raised
        return message

    async def start(self) -> Exchange:
        """Waits for the response's status and headers."""
        message = await self._next()
        assert message is not None and message["type"] == "http.response.start", message
        self.status = message["status"]
        self.headers = {k.decode(): v.decode() for k, v in message.get("headers", [])}
        return self

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body's pieces as the app sends them."""
        while True:
            message = await self._next()
            if message is None:
                return
            if message["type"] != "http.response.body":
                continue
            if message.get("body"):
                yield message["body"]
            if not message.get("more_body"):
                return

    async def lines(self) -> AsyncIterator[str]:
        pending = b""
        async for chunk in self.chunks():
            pending += chunk
            *done, pending = pending.split(b"\n")
            for line in done:
                yield line.decode()
        if pending:
            yield pending.decode()

    async def read(self) -> bytes:
        return b"".join([c async for c in self.chunks()])

    async def json(self) -> Any:
        return json.loads(await self.read())

    async def leave(self) -> None:
        """The client hangs up; returns once the app has finished with the request."""
        self._left.set()
        await self.task


def begin(
    app: ASGIApp,
    method: str,
    path: str,
    *,
    json_body: Any = None,
    headers: dict[str, str] | None = None,
) -> Exchange:
    """Sends a request; `await begin(...).start()` waits for its status, the body is read from
    the exchange."""
    body = b"" if json_body is None else json.dumps(json_body).encode()
    head = {"host": "gateway.test", **(headers or {})}
    if json_body is not None:
        head["content-type"] = "application/json"
    head["content-length"] = str(len(body))
    return Exchange(app, method, path, body, head)
