"""`body_arrived` against the uvicorn this project runs on: it says yes when a request's body
came with its head (the edge then reads it without setting a timeout) and no while the body is
still on its way (the read is timed). A uvicorn whose response cycle no longer has the event it
reads fails here rather than timing every read in silence; a server without the connection
defences gets no test at all."""

from __future__ import annotations

import json
import socket
import time
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mindrouter.http.connections import ConnectionPolicy, body_arrived
from mindrouter.serving import ThreadServer


def _app(*, guarded: bool) -> Starlette:
    async def echo(request: Request) -> Response:
        arrived = body_arrived(request.scope)
        before = None if arrived is None else arrived()
        body = await request.body()
        return JSONResponse({"before": before, "length": len(body)})

    app = Starlette(routes=[Route("/echo", echo, methods=["POST"])])
    if guarded:
        app.state.connection_policy = ConnectionPolicy()
    return app


def _post(port: int, body: bytes, *, pause: float = 0.0) -> dict[str, Any]:
    """POSTs `body` on a raw socket: the head and the body in one write, or the body `pause`
    seconds after the head."""
    head = (
        f"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", port)) as s:
        if pause:
            s.sendall(head)
            time.sleep(pause)
            s.sendall(body)
        else:
            s.sendall(head + body)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    return json.loads(answer.split(b"\r\n\r\n", 1)[1])  # type: ignore[no-any-return]


def test_a_body_sent_with_its_head_has_arrived_one_sent_later_has_not() -> None:
    with ThreadServer(_app(guarded=True)) as server:
        port = int(server.url.rsplit(":", 1)[1])
        together = _post(port, b'{"x": 1}')
        later = _post(port, b'{"x": 1}', pause=0.3)
    assert together == {"before": True, "length": 8}
    assert later == {"before": False, "length": 8}


def test_no_test_without_the_connection_defences() -> None:
    with ThreadServer(_app(guarded=False)) as server:
        port = int(server.url.rsplit(":", 1)[1])
        assert _post(port, b"{}") == {"before": None, "length": 2}
