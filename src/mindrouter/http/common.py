"""What every dialect's routes share: body parsing, request context, JSON and stream responses."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

import orjson
import structlog
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from mindrouter.canonical import Done, StreamEvent, StreamFailed
from mindrouter.errors import InvalidRequest, PayloadTooLarge
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
        endpoint=request.url.path,
        request_id=rid,
        client_ip=client_ip(request),
        user_agent=request.headers.get("user-agent"),
    )
    request.state.ctx = ctx
    return ctx


def client_ip(request: Request) -> str | None:
    """The caller's address. X-Forwarded-For is believed only when the peer is a configured
    proxy, and then only up to the first address that is not one of ours."""
    peer = request.client.host if request.client else None
    trusted: frozenset[str] = getattr(request.app.state, "trusted_proxies", frozenset())
    if peer is None or peer not in trusted:
        return peer
    forwarded = request.headers.get("x-forwarded-for")
    if not forwarded:
        return peer
    for hop in reversed([h.strip() for h in forwarded.split(",") if h.strip()]):
        if hop not in trusted:
            return hop
    return peer


async def read_json(request: Request, limit: int) -> Any:
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise PayloadTooLarge(f"the request body is larger than the limit of {limit} bytes")
    body = await request.body()
    if len(body) > limit:
        raise PayloadTooLarge(f"the request body is larger than the limit of {limit} bytes")
    if not body:
        raise InvalidRequest("the request body is empty; expected a JSON object")
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"the request body is not valid JSON: {exc}") from None


def json_response(body: Any, ctx: RequestContext, status: int = 200) -> Response:
    return Response(
        orjson.dumps(body),
        status_code=status,
        media_type="application/json",
        headers={"x-request-id": ctx.request_id},
    )


EndHook = Callable[[], Awaitable[None]]


async def _encode_stream(
    encoder: StreamEncoder,
    events: AsyncGenerator[StreamEvent, None],
    before_end: EndHook | None,
) -> AsyncIterator[bytes]:
    try:
        head = encoder.start()
        if head:
            yield head
        async for event in events:
            out = encoder.encode(event)
            if before_end is not None and isinstance(event, Done | StreamFailed):
                # What must be in place before the client reads the ending (a stored response
                # that its next request may name) is done before the ending is written.
                await before_end()
            if out:
                yield out
    finally:
        await events.aclose()


def stream_response(
    encoder: StreamEncoder,
    events: AsyncGenerator[StreamEvent, None],
    ctx: RequestContext,
    extra_headers: dict[str, str] | None = None,
    *,
    before_end: EndHook | None = None,
) -> StreamingResponse:
    headers = {
        "x-request-id": ctx.request_id,
        "cache-control": "no-cache",
        # Proxies such as nginx would otherwise hold chunks back.
        "x-accel-buffering": "no",
    }
    if extra_headers:
        headers.update(extra_headers)
    return StreamingResponse(
        _encode_stream(encoder, events, before_end),
        media_type=encoder.content_type,
        headers=headers,
    )
