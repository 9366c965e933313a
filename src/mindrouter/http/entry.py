"""How a dialect's routes take a request, composed once so that a handler holds only
decode → call → encode.

`Entry(gateway, dialect)` turns a handler into a Starlette endpoint that first opens the
request's context in that dialect (its errors are answered in the dialect's shape, see
`app.py`), takes the caller the edge found (`Gateway.authenticate`), and, for `with_body`,
reads and decodes the body. The edge middleware (`http/edge.py`) has checked the key on the
headers and bounds the body as it streams in (size and idle time); `decode_body` adds the checks
on the decoded value (valid JSON, nesting depth), so every route that takes its body here gets
all of them.

Plain closures, not FastAPI dependencies: these routes are the hot path, and an entry adds no
work per request beyond the call into the handler.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from mindrouter.http.bodies import decode_body
from mindrouter.http.common import new_context
from mindrouter.pipeline.context import Dialect, RequestContext
from mindrouter.pipeline.gateway import Gateway

Endpoint = Callable[[Request], Awaitable[Response]]
BodyHandler = Callable[[RequestContext, Any], Awaitable[Response]]
RequestHandler = Callable[[RequestContext, Request], Awaitable[Response]]


class Entry:
    def __init__(self, gateway: Gateway, dialect: Dialect) -> None:
        self._authenticate = gateway.authenticate
        self._dialect: Dialect = dialect

    def with_body(self, handler: BodyHandler) -> Endpoint:
        """An endpoint that hands `handler` the context and the decoded JSON body."""
        authenticate, dialect = self._authenticate, self._dialect

        @functools.wraps(handler)
        async def endpoint(request: Request) -> Response:
            ctx = new_context(request, dialect)
            await authenticate(ctx, request.headers)
            return await handler(ctx, await decode_body(await request.body()))

        return endpoint

    def with_request(self, handler: RequestHandler) -> Endpoint:
        """An endpoint that hands `handler` the context and the request (path and query
        parameters, or nothing more), for the routes that take no body."""
        authenticate, dialect = self._authenticate, self._dialect

        @functools.wraps(handler)
        async def endpoint(request: Request) -> Response:
            ctx = new_context(request, dialect)
            await authenticate(ctx, request.headers)
            return await handler(ctx, request)

        return endpoint
