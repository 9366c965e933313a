"""What every dialect's routes share: the request context, the caller's address, JSON and
stream responses. How a route takes a request (context, caller, body) is `http/entry.py`.
"""

from __future__ import annotations

import contextlib
import ipaddress
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol

import orjson
import structlog
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from mindrouter.canonical import Done, Events, EventSink, StreamEvent, StreamFailed
from mindrouter.errors import InternalError, MindRouterError
from mindrouter.http.connections import direct_writer
from mindrouter.http.disconnect import SERVER_SEND
from mindrouter.pipeline.context import Dialect, RequestContext, new_request_id


class StreamEncoder(Protocol):
    @property
    def content_type(self) -> str: ...

    def start(self) -> bytes: ...

    def encode(self, event: StreamEvent) -> bytes: ...


def new_context(request: Request, dialect: Dialect) -> RequestContext:
    rid = new_request_id()
    request.state.request_id = rid
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(request_id=rid)
    ctx = RequestContext(
        dialect=dialect,
        endpoint=request.scope["path"],
        request_id=rid,
        client_ip=client_ip(request),
        user_agent=request.headers.get("user-agent"),
    )
    # The edge has already checked the key of every route that needs one.
    ctx.principal = getattr(request.state, "principal", None)
    request.state.ctx = ctx
    return ctx


class TrustedProxies:
    """Addresses and CIDR ranges (`10.0.0.0/8`, `fd00::/8`) of reverse proxies we believe."""

    def __init__(self, entries: Iterable[str]) -> None:
        self._networks = [ipaddress.ip_network(e.strip(), strict=False) for e in entries]

    def __bool__(self) -> bool:
        return bool(self._networks)

    def __contains__(self, address: object) -> bool:
        if not self._networks or not isinstance(address, str):
            return False
        try:
            ip = ipaddress.ip_address(address.strip())
        except ValueError:
            return False
        return any(ip in net for net in self._networks)


NO_PROXIES = TrustedProxies(())


def client_ip(request: Request) -> str | None:
    peer = request.client.host if request.client else None
    trusted: TrustedProxies = getattr(request.app.state, "trusted_proxies", NO_PROXIES)
    return client_address(peer, request.headers.get("x-forwarded-for"), trusted)


def client_address(peer: str | None, forwarded: str | None, trusted: TrustedProxies) -> str | None:
    """The caller's address. X-Forwarded-For is believed only when the peer is a configured
    proxy, and then only up to the first address that is not one of ours."""
    if peer is None or not forwarded or peer not in trusted:
        return peer
    for hop in reversed([h.strip() for h in forwarded.split(",") if h.strip()]):
        if hop not in trusted:
            # Only a well-formed address is recorded: the header is free text.
            try:
                return str(ipaddress.ip_address(hop))
            except ValueError:
                return peer
    return peer


def json_response(body: Any, ctx: RequestContext, status: int = 200) -> Response:
    return Response(
        orjson.dumps(body),
        status_code=status,
        media_type="application/json",
        headers={"x-request-id": ctx.request_id},
    )


EndHook = Callable[[], Awaitable[None]]


class EventStream(Response):
    """A streamed answer: each engine event encoded in the caller's dialect and sent at once.

    Starlette's `StreamingResponse` is not used: on this server (ASGI spec 2.3) it runs the
    stream in an anyio task group beside a second task that waits for the disconnect, and puts
    one more async generator between the events and the socket. Here a disconnect is already
    noticed by `CancelOnDisconnect`, which cancels the request's task, so the one loop below
    encodes and sends each event as it comes, and closes the event generator however it ends
    (the pipeline's clean-up runs there: the engine's stream closed, the tokens charged). The
    chunks between the response's start and its end go to the server's `send` directly
    (`SERVER_SEND`), past the middleware layers, which only look at a start or an end.

    Once the first event is out, the events are pushed (`canonical.Events`) to a sink that
    encodes them and writes them to the client's socket in the engine connection's callback
    (`DirectWriter`); what the generator still yields (the ending, the event after the client
    fell behind, when the server's `send` waits for its socket to drain) goes the way above.
    """

    def __init__(
        self,
        encoder: StreamEncoder,
        events: Events,
        headers: dict[str, str],
        before_end: EndHook | None,
    ) -> None:
        self.status_code = 200
        self.media_type = encoder.content_type
        self.background = None
        self._encoder = encoder
        self._events = events
        self._before_end = before_end
        self.init_headers(headers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        encoder, before_end, events = self._encoder, self._before_end, self._events
        # The start and the end go through every layer; the chunks between, straight out.
        chunk_send: Send = scope.get(SERVER_SEND, send)
        # The stream's opening (a role chunk, a `message_start`) and its first event are ready
        # at the same moment (the route waited for the first event), so they go out in one
        # write; so do the ending and the end of the body.
        head = ending = b""
        try:
            try:
                head = encoder.start()
            except Exception as exc:
                await _failed_inside(events, exc)
                raise
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            writer = direct_writer(scope)
            push = None if writer is None else _pusher(encoder, writer.write)
            sink: EventSink | None = None  # the push, once the head is out
            while True:
                try:
                    event = await events.asend(sink)
                except StopAsyncIteration:
                    break
                try:
                    out = encoder.encode(event)
                except Exception as exc:
                    await _failed_inside(events, exc)
                    raise
                if head:
                    out, head = head + out, b""
                if isinstance(event, Done | StreamFailed):
                    if before_end is not None:
                        # What must be in place before the client reads the ending (a stored
                        # response that its next request may name) is done before it is written.
                        await before_end()
                    ending = out  # the last event: the stream ends after it
                elif out:
                    await chunk_send({"type": "http.response.body", "body": out, "more_body": True})
                # Pushed once the head is out and while the client takes what is written at
                # once; otherwise pulled, and the server's `send` waits for the client.
                sink = push if not head and writer is not None and writer.ready else None
        finally:
            await events.aclose()
        await send({"type": "http.response.body", "body": head + ending, "more_body": False})


async def _failed_inside(events: Events, exc: Exception) -> None:
    """Closes the pipeline's `events` after the gateway's own code failed with `exc` while they
    waited (an encoder that the response called, say). The failure is thrown into them first,
    so that the request is recorded as an error: only closing them would record it as
    cancelled, as if the client had left."""
    if isinstance(exc, MindRouterError):
        # The pipeline takes one of its own errors for the engine's (a failing backend would
        # count it): the gateway's is thrown as what it is.
        exc = InternalError(f"the stream failed inside the gateway: {exc}")
    with contextlib.suppress(Exception):  # what the events raise or yield back
        await events.athrow(exc)
    await events.aclose()


def _pusher(encoder: StreamEncoder, write: Callable[[bytes], bool]) -> EventSink:
    """Encodes the events of a batch and writes them to the client in one chunk; wants more
    while the client takes them at once."""
    encode = encoder.encode

    def push(batch: list[StreamEvent]) -> bool:
        out = encode(batch[0]) if len(batch) == 1 else b"".join([encode(e) for e in batch])
        return write(out) if out else True

    return push


def stream_response(
    encoder: StreamEncoder,
    events: Events,
    ctx: RequestContext,
    extra_headers: dict[str, str] | None = None,
    *,
    before_end: EndHook | None = None,
) -> EventStream:
    headers = {
        "x-request-id": ctx.request_id,
        "cache-control": "no-cache",
        # Proxies such as nginx would otherwise hold chunks back.
        "x-accel-buffering": "no",
    }
    if extra_headers:
        headers.update(extra_headers)
    return EventStream(encoder, events, headers, before_end)
