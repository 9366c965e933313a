"""Ollama-format entry points under /api: chat, generate, embed(dings), tags, ps, show, version."""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from typing import Any

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from mindrouter import __version__
from mindrouter.canonical import (
    ChatAssembler,
    ChatResult,
    ReasoningDelta,
    StreamEvent,
    TextDelta,
    ToolCallStart,
)
from mindrouter.dialects import ollama as dialect
from mindrouter.http.common import StreamEncoder, json_response, stream_response
from mindrouter.http.entry import Entry
from mindrouter.pipeline.context import RequestContext
from mindrouter.pipeline.gateway import Gateway
from mindrouter.routing.catalog import ModelSpec

# How long a model counts as loaded after its last use, like Ollama's default keep_alive.
KEEP_ALIVE_S = 300.0


def _now_iso() -> str:
    return dialect.format_rfc3339(time.time())


def _timings(ctx: RequestContext, first_token: float | None = None) -> dialect.Timings:
    return dialect.Timings.from_marks(
        start=ctx.received_at, first_token=first_token, end=time.monotonic()
    )


# Events that mean the model has started producing output.
_OUTPUT = (ReasoningDelta, TextDelta, ToolCallStart)


async def _collect(
    model: str, events: AsyncGenerator[StreamEvent, None]
) -> tuple[ChatResult, float | None]:
    """A whole reply folded from a stream, and when its first output arrived.

    Ollama clients compute prompt and generation speeds from `prompt_eval_duration` and
    `eval_duration`. Only a stream shows where one ends and the other begins, so non-streamed
    replies are read as a stream too; a unary call would leave `eval_duration` at zero.
    """
    assembler = ChatAssembler(model)
    first_output: float | None = None
    try:
        async for event in events:
            if first_output is None and isinstance(event, _OUTPUT):
                first_output = time.monotonic()
            assembler.feed(event)
    finally:
        await events.aclose()
    if assembler.error is not None:
        raise assembler.error.error
    return assembler.result(), first_output


def _view(gateway: Gateway, spec: ModelSpec, now: float) -> dialect.ModelView:
    last = gateway.catalog.last_used(spec.name)
    loaded = last is not None and now - last < KEEP_ALIVE_S
    return dialect.ModelView(
        name=spec.name,
        context_length=spec.context_length,
        modified_at=_now_iso(),
        capabilities=sorted(spec.capabilities),
        expires_at=dialect.format_rfc3339(time.time() + KEEP_ALIVE_S - (now - last))
        if loaded and last is not None
        else None,
        loaded=loaded,
    )


def _streamer(ctx: RequestContext, model: str, generate: bool) -> StreamEncoder:
    cls = dialect.GenerateStreamEncoder if generate else dialect.ChatStreamEncoder
    return cls(model=model, clock=time.monotonic, started_at=ctx.received_at, now_iso=_now_iso)


def ollama_routes(gateway: Gateway) -> list[BaseRoute]:
    entry = Entry(gateway, "ollama")
    return [*_inference_routes(gateway, entry), *_model_routes(gateway, entry)]


def _inference_routes(gateway: Gateway, entry: Entry) -> list[BaseRoute]:
    """/api/chat, /api/generate, /api/embed and /api/embeddings."""

    @entry.with_body
    async def chat(ctx: RequestContext, body: Any) -> Response:
        action = dialect.chat_load_action(body)
        if action is not None:
            req = dialect.decode_chat_request(body)
            await gateway.model_for(ctx, req.model)
            return json_response(
                dialect.encode_chat_load_response(action, model=req.model, created_at=_now_iso()),
                ctx,
            )
        req = dialect.decode_chat_request(body)
        if req.stream:
            streamer = _streamer(ctx, req.model, False)
            # Opened last: once open, only the response's own `try` closes the stream.
            return stream_response(streamer, await gateway.open_stream(ctx, req), ctx)
        events = await gateway.open_stream(ctx, req)
        result, first_output = await _collect(req.model, events)
        return json_response(
            dialect.encode_chat_response(
                result,
                model=req.model,
                created_at=_now_iso(),
                timings=_timings(ctx, first_output),
            ),
            ctx,
        )

    @entry.with_body
    async def generate(ctx: RequestContext, body: Any) -> Response:
        action = dialect.generate_load_action(body)
        req = dialect.decode_generate_request(body)
        if action is not None:
            await gateway.model_for(ctx, req.model)
            return json_response(
                dialect.encode_generate_load_response(
                    action, model=req.model, created_at=_now_iso()
                ),
                ctx,
            )
        if req.stream:
            streamer = _streamer(ctx, req.model, True)
            return stream_response(streamer, await gateway.open_stream(ctx, req), ctx)
        events = await gateway.open_stream(ctx, req)
        result, first_output = await _collect(req.model, events)
        return json_response(
            dialect.encode_generate_response(
                result,
                model=req.model,
                created_at=_now_iso(),
                timings=_timings(ctx, first_output),
            ),
            ctx,
        )

    @entry.with_body
    async def embed(ctx: RequestContext, body: Any) -> Response:
        req = dialect.decode_embed_request(body)
        result = await gateway.embed(ctx, req)
        return json_response(
            dialect.encode_embed_response(result, model=req.model, timings=_timings(ctx)), ctx
        )

    @entry.with_body
    async def embeddings(ctx: RequestContext, body: Any) -> Response:
        req = dialect.decode_embeddings_request(body)
        result = await gateway.embed(ctx, req)
        return json_response(dialect.encode_embeddings_response(result), ctx)

    return [
        Route("/api/chat", chat, methods=["POST"]),
        Route("/api/generate", generate, methods=["POST"]),
        Route("/api/embed", embed, methods=["POST"]),
        Route("/api/embeddings", embeddings, methods=["POST"]),
    ]


def _model_routes(gateway: Gateway, entry: Entry) -> list[BaseRoute]:
    """/api/tags, /api/ps, /api/show, /api/version and the liveness probe at /."""

    @entry.with_request
    async def tags(ctx: RequestContext, request: Request) -> Response:
        now = time.monotonic()
        views = [_view(gateway, s, now) for s in gateway.models_for(ctx)]
        return json_response(dialect.encode_tags(views), ctx)

    @entry.with_request
    async def ps(ctx: RequestContext, request: Request) -> Response:
        now = time.monotonic()
        views = [v for v in (_view(gateway, s, now) for s in gateway.models_for(ctx)) if v.loaded]
        return json_response(dialect.encode_ps(views), ctx)

    @entry.with_body
    async def show(ctx: RequestContext, body: Any) -> Response:
        name = dialect.decode_show_request(body)
        spec = await gateway.model_for(ctx, name)
        return json_response(dialect.encode_show(_view(gateway, spec, time.monotonic())), ctx)

    @entry.with_request
    async def version(ctx: RequestContext, request: Request) -> Response:
        return json_response(dialect.encode_version(__version__), ctx)

    async def root(request: Request) -> Response:
        # Ollama clients probe GET / for liveness and expect 200 with plain text.
        return PlainTextResponse("Ollama is running (MindRouter)")

    return [
        Route("/api/tags", tags, methods=["GET", "HEAD"]),
        Route("/api/ps", ps, methods=["GET"]),
        Route("/api/show", show, methods=["POST"]),
        Route("/api/version", version, methods=["GET", "HEAD"]),
        Route("/", root, methods=["GET", "HEAD"]),
    ]
