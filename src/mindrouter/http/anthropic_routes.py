"""Anthropic-format entry points: messages, count_tokens, models.

Each is served under `/anthropic/v1/...` and, since most guides point `ANTHROPIC_BASE_URL` at a
gateway's root, at `/v1/messages` and `/v1/messages/count_tokens` too (one handler for both).
The root `GET /v1/models` belongs to the OpenAI dialect, which hands a caller that sends an
`anthropic-version` header to `models` here. Query strings (Claude Code adds `?beta=true`) and
the `anthropic-beta` header change nothing: the gateway serves one feature set.

What a request carried that the gateway accepts but cannot honour is logged at debug level with
the request id (`anthropic fields dropped`), field by field.
"""

from __future__ import annotations

import datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from mindrouter.dialects import anthropic as dialect
from mindrouter.dialects.anthropic.fields import Dropped
from mindrouter.http.common import json_response, stream_response
from mindrouter.http.entry import Endpoint, Entry
from mindrouter.observability.logging import log
from mindrouter.pipeline.context import RequestContext
from mindrouter.pipeline.gateway import Gateway
from mindrouter.settings import Settings


def _log_dropped(dropped: Dropped) -> None:
    if dropped.paths:
        log.debug("anthropic fields dropped", fields=dropped.paths)


def anthropic_models_handler(gateway: Gateway) -> Endpoint:
    """`GET /v1/models` in Anthropic's shape, for the routes of both prefixes."""

    @Entry(gateway, "anthropic").with_request
    async def models(ctx: RequestContext, request: Request) -> Response:
        ids = [name for spec in gateway.models_for(ctx) for name in (spec.name, *spec.aliases)]
        created = datetime.datetime.fromtimestamp(ctx.created, datetime.UTC).isoformat()
        return json_response(dialect.encode_model_list(ids, created_at=created), ctx)

    return models


def anthropic_routes(gateway: Gateway, settings: Settings) -> list[BaseRoute]:
    key = settings.secret_key.encode()
    entry = Entry(gateway, "anthropic")

    @entry.with_body
    async def messages(ctx: RequestContext, body: Any) -> Response:
        dropped = Dropped()
        req = dialect.decode_messages_request(body, signing_key=key, dropped=dropped)
        _log_dropped(dropped)
        message_id = "msg_" + ctx.request_id.removeprefix("chatcmpl-")
        headers = {"request-id": ctx.request_id}
        if req.stream:
            encoder = dialect.MessagesStreamEncoder(
                message_id=message_id,
                model=req.model,
                # Counted when the flight opens (off the loop for a long prompt), not again.
                input_tokens_hint=lambda: ctx.input_estimate,
                signing_key=key,
                return_reasoning=req.reasoning.return_reasoning,
            )
            # Opened last: once open, only the response's own `try` closes the stream.
            events = await gateway.open_stream(ctx, req)
            return stream_response(encoder, events, ctx, headers)
        result = await gateway.generate(ctx, req)
        response = json_response(
            dialect.encode_messages_response(
                result,
                message_id=message_id,
                model=req.model,
                signing_key=key,
                return_reasoning=req.reasoning.return_reasoning,
            ),
            ctx,
        )
        response.headers.update(headers)
        return response

    @entry.with_body
    async def count_tokens(ctx: RequestContext, body: Any) -> Response:
        dropped = Dropped()
        req = dialect.decode_count_tokens_request(body, signing_key=key, dropped=dropped)
        _log_dropped(dropped)
        count = await gateway.count_tokens(ctx, req)
        return json_response(dialect.encode_count_tokens_response(count), ctx)

    routes: list[BaseRoute] = [
        Route(prefix + path, handler, methods=["POST"])
        for prefix in ("/anthropic", "")
        for path, handler in (
            ("/v1/messages", messages),
            ("/v1/messages/count_tokens", count_tokens),
        )
    ]
    routes.append(Route("/anthropic/v1/models", anthropic_models_handler(gateway), methods=["GET"]))
    return routes
