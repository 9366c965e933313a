"""Anthropic-format entry points under /anthropic: messages, count_tokens, models."""

from __future__ import annotations

import datetime

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from mindrouter.dialects import anthropic as dialect
from mindrouter.http.common import json_response, new_context, read_json, stream_response
from mindrouter.pipeline.gateway import Gateway
from mindrouter.settings import Settings
from mindrouter.tokens import estimate_chat_input


def anthropic_routes(gateway: Gateway, settings: Settings) -> list[BaseRoute]:
    limit = settings.max_body_bytes
    key = settings.secret_key.encode()

    async def messages(request: Request) -> Response:
        ctx = new_context(request, "anthropic")
        await gateway.authenticate(ctx, request.headers)
        body = await read_json(request, limit)
        req = dialect.decode_messages_request(body, signing_key=key)
        message_id = "msg_" + ctx.request_id.removeprefix("chatcmpl-")
        headers = {"request-id": ctx.request_id}
        if req.stream:
            events = await gateway.open_chat_stream(ctx, req)
            encoder = dialect.MessagesStreamEncoder(
                message_id=message_id,
                model=req.model,
                input_tokens_hint=estimate_chat_input(req),
                signing_key=key,
                return_reasoning=req.reasoning.return_reasoning,
            )
            return stream_response(encoder, events, ctx, headers)
        result = await gateway.chat(ctx, req)
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

    async def count_tokens(request: Request) -> Response:
        ctx = new_context(request, "anthropic")
        await gateway.authenticate(ctx, request.headers)
        body = await read_json(request, limit)
        req = dialect.decode_count_tokens_request(body, signing_key=key)
        count = await gateway.count_tokens(ctx, req)
        return json_response(dialect.encode_count_tokens_response(count), ctx)

    async def models(request: Request) -> Response:
        ctx = new_context(request, "anthropic")
        await gateway.authenticate(ctx, request.headers)
        ids = [name for spec in gateway.catalog.models() for name in (spec.name, *spec.aliases)]
        created = datetime.datetime.fromtimestamp(ctx.created, datetime.UTC).isoformat()
        return json_response(dialect.encode_model_list(ids, created_at=created), ctx)

    return [
        Route("/anthropic/v1/messages", messages, methods=["POST"]),
        Route("/anthropic/v1/messages/count_tokens", count_tokens, methods=["POST"]),
        Route("/anthropic/v1/models", models, methods=["GET"]),
    ]
