"""The routes at a fixed path, reached by one dict lookup.

Starlette reaches an endpoint through its exception middleware, its router (two calls), the
route, and a request-response wrapper that handles exceptions a second time: eight coroutines
and about as many closures and cells per request, each alive until the response is complete.
For a stream that is its whole life, and the collector walks them on every pass that reaches
their generation (about a sixth of what an open stream keeps).

`ExactRoutes` sits inside the edge, in front of all that. A request whose method and path name a
route without path parameters goes to that route's endpoint directly; an exception the endpoint
raises goes to the app's handler for its class, as Starlette's layers would send it. Every other
request goes on to the router as before: path parameters, trailing-slash redirects, 404 and 405,
the console, the admin API.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from mindrouter.http.entry import Endpoint

Handler = Callable[[Request, Exception], Awaitable[Response]]


class ExactRoutes:
    """The endpoints of `routes` by (method, path), for the routes the router would pick by
    that pair alone; `handlers` are the app's exception handlers by class (the ones for
    `Exception` and status 500 belong to the outermost layer, which answers what nothing else
    handled, and are left to it). Starlette builds its middleware at the first request, so the
    table holds every route added before then; a route added later is served by the router."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        routes: Sequence[BaseRoute],
        handlers: Mapping[Any, Handler],
    ) -> None:
        self.app = app
        self._endpoints = exact_endpoints(routes)
        self._handlers = {
            cls: handler
            for cls, handler in handlers.items()
            if isinstance(cls, type) and cls is not Exception
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Under a root path the router matches what follows it; such requests take its way.
        if scope["type"] == "http" and not scope.get("root_path"):
            endpoint = self._endpoints.get((scope["method"], scope["path"]))
            if endpoint is not None:
                request = Request(scope, receive)
                try:
                    response = await endpoint(request)
                except Exception as exc:
                    response = await self._handled(request, exc)
                # An exception once the response has started cannot be answered with another
                # response: it goes on to the outermost layer, as under the router.
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)

    async def _handled(self, request: Request, exc: Exception) -> Response:
        for cls in type(exc).__mro__:
            handler = self._handlers.get(cls)
            if handler is not None:
                response = await handler(request, exc)
                # An exception instance raised again later must not carry this traceback.
                exc.__traceback__ = None
                return response
        raise exc


def exact_endpoints(routes: Sequence[BaseRoute]) -> dict[tuple[str, str], Endpoint]:
    """(method, path) → endpoint, for each route with a fixed path and an async function for an
    endpoint, and each of its methods no earlier route fully matches (the router takes the
    first full match)."""
    endpoints: dict[tuple[str, str], Endpoint] = {}
    for i, route in enumerate(routes):
        if (
            not isinstance(route, Route)
            or route.param_convertors
            or route.methods is None
            or not inspect.iscoroutinefunction(route.endpoint)
        ):
            continue
        for method in route.methods:
            scope = {"type": "http", "method": method, "path": route.path, "root_path": ""}
            if not any(earlier.matches(scope)[0] is Match.FULL for earlier in routes[:i]):
                endpoints[(method, route.path)] = route.endpoint
    return endpoints
