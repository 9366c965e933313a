"""The edge: what every request passes before any route sees it.

One ASGI middleware around the whole app, so that routes added later get the same treatment
without doing anything:

- the URL is checked (no NUL: PostgreSQL cannot store one, so it must never reach a query);
- the key is checked on the headers, before one byte of the body is read: any key for the API,
  an admin key for `/admin/*` and the OpenAPI document, an admin key or the metrics token for
  `/metrics`; only the health probes are open, and the web console under `/console`, which
  signs its users in with a session of its own and bounds its forms more tightly. Failed
  attempts are rate-limited by the authenticator, per client address and per key prefix;
- the body is bounded as it streams in: a declared length over `max_body_bytes` is refused at
  once, and a body (chunked or not) that passes the limit is cut with 413 at the chunk that
  passes it; a body that stops arriving for `body_timeout_s` gets 408;
- a response sent before the request body was read, a 500, or any response once the process is
  draining (SIGTERM), carries `Connection: close`, so a client never sends its next request on
  a connection the server is about to drop;
- a client that leaves while its body is being read ends the request quietly.

The principal found here is left in the request's state, where the routes take it from.
`MetricsPortEdge` is the much smaller edge of the separate metrics listener.
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Callable
from typing import Literal

from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mindrouter.errors import (
    Forbidden,
    InvalidRequest,
    MindRouterError,
    PayloadTooLarge,
    RequestTimeout,
    Unauthenticated,
)
from mindrouter.http.common import TrustedProxies, client_address
from mindrouter.http.connections import body_arrived
from mindrouter.http.errors import dialect_for_path, error_response
from mindrouter.identity.authenticate import Authenticator
from mindrouter.observability.logging import log
from mindrouter.pipeline.context import new_request_id
from mindrouter.pipeline.drain import Drain

Access = Literal["open", "key", "admin", "metrics"]

# Ollama clients probe "/" ("Ollama is running") before they send a key.
OPEN_PATHS = frozenset({"/", "/healthz", "/readyz"})
ADMIN_PATHS = frozenset({"/admin", "/openapi.json"})
CONSOLE = "/console"


def access_for(path: str) -> Access:
    if path in OPEN_PATHS or path == CONSOLE or path.startswith(CONSOLE + "/"):
        return "open"
    if path == "/metrics":
        return "metrics"
    if path in ADMIN_PATHS or path.startswith("/admin/"):
        return "admin"
    return "key"


class BoundedBody:
    """The app's `receive`, counting body bytes against the limit and timing each wait. A read
    whose bytes are already here (`arrived`, when the server can tell) has no wait to time:
    a request's body usually comes with its head, and a timeout costs three timers' worth."""

    def __init__(
        self,
        receive: Receive,
        limit: int,
        idle_timeout: float,
        headers: Headers,
        arrived: Callable[[], bool] | None = None,
    ) -> None:
        self._receive = receive
        self._limit = limit
        self._idle = idle_timeout
        self._arrived = arrived
        self.received = 0
        # A request that declares no body has nothing left to read from the start.
        self.complete = "transfer-encoding" not in headers and headers.get(
            "content-length", "0"
        ) in ("", "0")

    async def __call__(self) -> Message:
        if self.complete:
            # After the body only a disconnect can come, and waiting for it has no deadline.
            return await self._receive()
        arrived = self._arrived
        if arrived is not None and arrived():
            message = await self._receive()
        else:
            try:
                async with asyncio.timeout(self._idle):
                    message = await self._receive()
            except TimeoutError:
                raise RequestTimeout(
                    f"the request body stopped arriving for {self._idle:g} seconds"
                ) from None
        if message["type"] != "http.request":
            self.complete = True
            return message
        self.received += len(message.get("body", b""))
        if self.received > self._limit:
            raise PayloadTooLarge(too_large(self._limit))
        if not message.get("more_body", False):
            self.complete = True
        return message


def too_large(limit: int) -> str:
    return f"the request body is larger than the limit of {limit} bytes"


class Edge:
    def __init__(
        self,
        app: ASGIApp,
        *,
        authenticator: Authenticator,
        max_body_bytes: int,
        body_timeout_s: float,
        trusted_proxies: TrustedProxies,
        drain: Drain,
        metrics_token: str | None = None,
    ) -> None:
        self.app = app
        self._drain = drain
        self._auth = authenticator
        self._limit = max_body_bytes
        self._idle = body_timeout_s
        self._trusted = trusted_proxies
        self._metrics_token = metrics_token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        body = BoundedBody(receive, self._limit, self._idle, headers, body_arrived(scope))

        async def guarded_send(message: Message) -> None:
            if message["type"] == "http.response.start" and (
                message["status"] == 500 or not body.complete or self._drain.started
            ):
                headers = [(k, v) for k, v in message.get("headers", []) if k != b"connection"]
                message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        try:
            await self._admit(scope, headers)
        except MindRouterError as exc:
            rid = new_request_id()
            scope.setdefault("state", {})["request_id"] = rid
            log.info("request refused at the edge", path=scope["path"], kind=exc.kind)
            response = error_response(exc, dialect_for_path(scope["path"]), rid)
            await response(scope, body, guarded_send)
            return
        try:
            await self.app(scope, body, guarded_send)
        except ClientDisconnect:
            # Nobody is left to answer; this is not the gateway's failure.
            log.info("client left before its request body was read", path=scope["path"])

    async def _admit(self, scope: Scope, headers: Headers) -> None:
        path: str = scope["path"]
        query: bytes = scope.get("query_string", b"")
        # `find`, not `in`: a bytes needle makes `in` raise and drop a TypeError on CPython 3.11.
        if "\x00" in path or (query and query.find(b"%00") >= 0):
            raise InvalidRequest("the URL must not contain a NUL character")
        length = headers.get("content-length")
        if length and length.isascii() and length.isdigit() and int(length) > self._limit:
            raise PayloadTooLarge(too_large(self._limit))
        access = access_for(path)
        if access == "open":
            return
        if access == "metrics" and self._metrics_token_matches(headers):
            return
        client = scope.get("client")
        source = client_address(
            client[0] if client else None, headers.get("x-forwarded-for"), self._trusted
        )
        principal = await self._auth.authenticate(headers, source=source)
        if access != "key" and not principal.is_admin:
            raise Forbidden("this endpoint needs an admin API key")
        # The routes take the caller from here rather than authenticating a second time.
        scope.setdefault("state", {})["principal"] = principal

    def _metrics_token_matches(self, headers: Headers) -> bool:
        return bool(self._metrics_token) and bearer_matches(headers, self._metrics_token or "")


def bearer_matches(headers: Headers, secret: str) -> bool:
    sent = headers.get("authorization", "")
    return hmac.compare_digest(sent.encode(), f"Bearer {secret}".encode())


class MetricsPortEdge:
    """The edge of the separate metrics listener (`metrics_port`), which serves `/metrics` alone.

    The port is meant for the cluster's internal network, so without a `metrics_token` it asks
    for nothing; with one, every request must carry it, as on the main port (admin keys are
    not looked up here: this listener never touches the database)."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self._token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        token = self._token
        if scope["type"] == "http" and token and not bearer_matches(Headers(scope=scope), token):
            refused = Unauthenticated("this port needs 'Authorization: Bearer <metrics_token>'")
            await error_response(refused, "openai", new_request_id())(scope, receive, send)
            return
        await self.app(scope, receive, send)
