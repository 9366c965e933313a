"""`DirectWriter` against the uvicorn this project runs on: a started chunked response of a
request served with the connection defences gets one, and what it writes reaches the client as
chunks of the same body; a response with a length, or a server without those defences, gets
none (its chunks go through `send`). A uvicorn whose response cycle no longer has what the
writer reads fails here rather than making every stream slower in silence."""

from __future__ import annotations

from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from mindrouter.http.connections import ConnectionPolicy, direct_writer
from mindrouter.serving import ThreadServer


class _Chunked(Response):
    """Writes its first chunk through `send`, the next ones through a `DirectWriter`; with a
    length instead, only notes that it gets no writer, before its start and after it."""

    def __init__(self, seen: dict[str, Any], *, length: bool = False) -> None:
        super().__init__()
        self.seen = seen
        self.length = length

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.length:
            before = direct_writer(scope)
            headers = [(b"content-length", b"2")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            self.seen["writers"] = [before, direct_writer(scope)]
            await send({"type": "http.response.body", "body": b"ok"})
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"one,", "more_body": True})
        writer = direct_writer(scope)
        self.seen["writer"] = writer
        if writer is not None:
            self.seen["ready"] = writer.ready
            self.seen["took"] = [writer.write(b"two,"), writer.write(b"three")]
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def _app(*, guarded: bool) -> tuple[Starlette, dict[str, Any]]:
    seen: dict[str, Any] = {}

    async def chunked(request: Request) -> Response:
        return _Chunked(seen)

    async def whole(request: Request) -> Response:
        return _Chunked(seen, length=True)

    app = Starlette(routes=[Route("/chunked", chunked), Route("/whole", whole)])
    if guarded:
        app.state.connection_policy = ConnectionPolicy()
    return app, seen


def test_a_chunked_response_gets_a_direct_writer_whose_chunks_reach_the_client() -> None:
    app, seen = _app(guarded=True)
    with ThreadServer(app) as server:
        r = httpx.get(server.url + "/chunked")
        whole = httpx.get(server.url + "/whole")
    assert r.status_code == 200
    assert r.headers["transfer-encoding"] == "chunked"
    assert r.content == b"one,two,three"
    assert seen["writer"] is not None
    assert seen["ready"] is True
    assert seen["took"] == [True, True]
    # Nothing started yet, then started with a length: no writer either time.
    assert whole.content == b"ok"
    assert seen["writers"] == [None, None]


def test_no_direct_writer_without_the_connection_defences() -> None:
    app, seen = _app(guarded=False)
    with ThreadServer(app) as server:
        r = httpx.get(server.url + "/chunked")
    assert r.content == b"one,"
    assert seen["writer"] is None
