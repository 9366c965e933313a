"""`CancelOnDisconnect` against the uvicorn this project runs on: a client that closes its
connection after sending its body cancels the request. Served with the connection defences,
the protocol calls the wrapper back (`ON_HANG_UP`) and no watcher task is started; under a
plain server the wrapper's watcher task notices the disconnect instead. A client that leaves
after its response is complete cancels nothing."""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from mindrouter.http.connections import ON_HANG_UP, ConnectionPolicy
from mindrouter.http.disconnect import CancelOnDisconnect
from mindrouter.serving import ThreadServer

BODY = b'{"x": 1}'


def _app(*, guarded: bool) -> tuple[Starlette, dict[str, Any]]:
    seen: dict[str, Any] = {
        "cancelled": threading.Event(),
        "waiting": threading.Event(),
        "left": threading.Event(),
        "after": threading.Event(),
    }

    async def hold(request: Request) -> Response:
        await request.body()
        seen["hooked"] = ON_HANG_UP in request.scope
        seen["tasks"] = len(asyncio.all_tasks())
        seen["waiting"].set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            seen["cancelled"].set()
            raise
        return PlainTextResponse("never")

    async def after_the_response() -> None:
        # Runs once the response is complete, in the request's task: the client leaves now.
        try:
            while not seen["left"].is_set():
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.2)  # time for the server to see the connection close
        except asyncio.CancelledError:
            seen["cancelled"].set()
            raise
        seen["after"].set()

    async def quick(request: Request) -> Response:
        await request.body()
        return PlainTextResponse("done", background=BackgroundTask(after_the_response))

    app = Starlette(
        routes=[Route("/hold", hold, methods=["POST"]), Route("/quick", quick, methods=["POST"])],
        middleware=[Middleware(CancelOnDisconnect)],
    )
    if guarded:
        app.state.connection_policy = ConnectionPolicy()
    return app, seen


def _post(port: int, path: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    head = f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-length: {len(BODY)}\r\n\r\n"
    sock.sendall(head.encode() + BODY)
    return sock


def _hang_up_while_held(guarded: bool) -> dict[str, Any]:
    """What the held request saw, once the client closed its connection and it was cancelled."""
    app, seen = _app(guarded=guarded)
    with ThreadServer(app) as server:
        sock = _post(server.port, "/hold")
        assert seen["waiting"].wait(10)
        sock.close()
        assert seen["cancelled"].wait(10)
    return seen


@pytest.mark.parametrize("guarded", [True, False], ids=["called-back", "watcher"])
def test_a_client_closing_its_connection_cancels_the_request(guarded: bool) -> None:
    assert _hang_up_while_held(guarded)["hooked"] is guarded


def test_the_call_back_starts_no_watcher_task() -> None:
    """The request's own task and the server's: nothing per request besides."""
    called_back, watched = (_hang_up_while_held(guarded)["tasks"] for guarded in (True, False))
    assert called_back == watched - 1


def test_a_client_leaving_after_its_response_cancels_nothing() -> None:
    """What the request's task does once its response is complete is not cut short."""
    app, seen = _app(guarded=True)
    with ThreadServer(app) as server:
        sock = _post(server.port, "/quick")
        reply = b""
        while b"done" not in reply:
            chunk = sock.recv(4096)
            assert chunk
            reply += chunk
        sock.close()
        seen["left"].set()
        assert seen["after"].wait(10)
    assert not seen["cancelled"].is_set()
