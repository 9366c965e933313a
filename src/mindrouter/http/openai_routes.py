"""OpenAI-format entry points: /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/models."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from mindrouter.dialects import openai as dialect
from mindrouter.errors import ModelNotFound
from mindrouter.http.anthropic_routes import anthropic_models_handler
from mindrouter.http.common import json_response, stream_response
from mindrouter.http.entry import Entry
from mindrouter.pipeline.context import RequestContext
from mindrouter.pipeline.gateway import Gateway
from mindrouter.settings import Settings


def openai_routes(gateway: Gateway, settings: Settings) -> list[BaseRoute]:
    reasoning_field = settings.reasoning_field
    entry = Entry(gateway, "openai")

    @entry.with_body
    async def chat_completions(ctx: RequestContext, body: Any) -> Response:
        req = dialect.decode_chat_request(body)
        if req.stream:
            encoder = dialect.ChatStreamEncoder(
                request_id=ctx.request_id,
                model=req.model,
                created=ctx.created,
                include_usage=dialect.wants_usage(body),
                reasoning_field=reasoning_field,
            )
            # Opened last: once open, only the response's own `try` closes the stream.
            events = await gateway.open_stream(ctx, req)
            return stream_response(encoder, events, ctx)
        result = await gateway.generate(ctx, req)
        return json_response(
            dialect.encode_chat_response(
                result,
                request_id=ctx.request_id,
                created=ctx.created,
                model=req.model,
                reasoning_field=reasoning_field,
            ),
            ctx,
        )

    @entry.with_body
    async def completions(ctx: RequestContext, body: Any) -> Response:
        req = dialect.decode_completion_request(body)
        if req.stream:
            encoder = dialect.CompletionStreamEncoder(
                request_id=ctx.request_id,
                model=req.model,
                created=ctx.created,
                include_usage=dialect.wants_usage(body),
            )
            events = await gateway.open_stream(ctx, req)
            return stream_response(encoder, events, ctx)
        result = await gateway.generate(ctx, req)
        return json_response(
            dialect.encode_completion_response(
                result, request_id=ctx.request_id, created=ctx.created, model=req.model
            ),
            ctx,
        )

    @entry.with_body
    async def embeddings(ctx: RequestContext, body: Any) -> Response:
        req, encoding = dialect.decode_embedding_request(body)
        result = await gateway.embed(ctx, req)
        return json_response(
            dialect.encode_embedding_response(result, model=req.model, encoding_format=encoding),
            ctx,
        )

    @entry.with_request
    async def openai_models(ctx: RequestContext, request: Request) -> Response:
        ids = [name for spec in gateway.models_for(ctx) for name in (spec.name, *spec.aliases)]
        return json_response(dialect.encode_model_list(ids, created=ctx.created), ctx)

    anthropic_models = anthropic_models_handler(gateway)

    async def list_models(request: Request) -> Response:
        # Anthropic clients pointed at the root (Claude Code, the anthropic SDK) ask here too;
        # they always send their version header, which no OpenAI client does.
        if "anthropic-version" in request.headers:
            return await anthropic_models(request)
        return await openai_models(request)

    @entry.with_request
    async def get_model(ctx: RequestContext, request: Request) -> Response:
        model_id = request.path_params["model_id"]
        spec = await gateway.model_for(ctx, model_id)
        if not gateway.catalog.serving(spec.name):
            raise ModelNotFound(model_id)
        return json_response(dialect.encode_model(model_id, created=ctx.created), ctx)

    return [
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/embeddings", embeddings, methods=["POST"]),
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/v1/models/{model_id:path}", get_model, methods=["GET"]),
    ]
