"""The gateway's request path from a decoded canonical request to a backend and back.

    authenticate → resolve model → open_flight (admit, audit, fair gate)
        → Dispatcher.run (the attempt loop) → relay → the flight's clean-up (account)

Every generation is read from an engine stream, and every attempt starts the same way: connect
and wait for the first event (`_first_of`). A stream waits for it before anything is sent to the
client, so a failure up to that point can still be retried on another backend or reported with a
status; a non-streamed answer is the same stream collected whole within the attempt, so it fails
over until its end. Either way, a request that ends early (the client left, the engine broke off)
is charged what was generated. The flight's scope is the request's: a unary call holds it around
the dispatch, a stream from the dispatch to the end of the relay.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from typing import TypeVar

import orjson
import structlog

from mindrouter.backends.base import EngineAdapter
from mindrouter.canonical import (
    AnyRequest,
    ChatAssembler,
    ChatRequest,
    ChatResult,
    CompletionRequest,
    Done,
    EmbeddingRequest,
    EmbeddingResult,
    RelevanceRequest,
    RelevanceResult,
    StreamEvent,
    StreamFailed,
)
from mindrouter.errors import (
    InternalError,
    MindRouterError,
    Overloaded,
    UpstreamError,
    UpstreamUnavailable,
)
from mindrouter.observability.logging import log
from mindrouter.pipeline.context import RequestContext
from mindrouter.pipeline.dispatch import Dispatcher
from mindrouter.pipeline.flight import Flight, open_flight
from mindrouter.pipeline.model_access import resolve_allowed, visible_models
from mindrouter.pipeline.services import Services
from mindrouter.pipeline.usage_sync import limit_key
from mindrouter.pipeline.views import RoutingViews
from mindrouter.routing.catalog import ModelSpec, check_modality
from mindrouter.routing.select import rank_backends
from mindrouter.stores.limits import Limits, UsageSnapshot
from mindrouter.tokens import estimate_chat_input

R = TypeVar("R", ChatRequest, CompletionRequest, EmbeddingRequest, RelevanceRequest)
G = TypeVar("G", ChatRequest, CompletionRequest)
T = TypeVar("T", ChatResult, EmbeddingResult, RelevanceResult)
Events = AsyncGenerator[StreamEvent, None]
Opener = Callable[[EngineAdapter, G], Events]
FirstOf = Callable[[EngineAdapter, G], Awaitable[tuple[StreamEvent, Events]]]


def _result_text(result: ChatResult | EmbeddingResult | RelevanceResult) -> str | None:
    """What the audit record keeps as the output: the text, or the scores of a rerank."""
    if isinstance(result, EmbeddingResult):
        return None
    if isinstance(result, RelevanceResult):
        return orjson.dumps(result.scores).decode()
    choice = result.first
    calls = "".join(f"\n[tool call {c.name}] {c.arguments}" for c in choice.tool_calls)
    return choice.text + calls


class Gateway:
    def __init__(self, services: Services) -> None:
        self.s = services
        self.catalog = services.catalog
        self.adapters: dict[str, EngineAdapter] = services.adapters
        self.dispatch = Dispatcher(services)
        self.views = RoutingViews(services, self.dispatch.decisions)  # for the admin views

    async def authenticate(self, ctx: RequestContext, headers: Mapping[str, str]) -> None:
        """The caller, unless the edge already found them for this request."""
        if ctx.principal is None:
            ctx.principal = await self.s.authenticator.authenticate(headers)
        structlog.contextvars.bind_contextvars(user=ctx.principal.user_name)

    def models_for(self, ctx: RequestContext) -> list[ModelSpec]:
        """The served models the authenticated caller may use."""
        return visible_models(self.s, ctx)

    async def model_for(self, ctx: RequestContext, name: str) -> ModelSpec:
        """The model `name` names for this caller (ModelNotFound when they may not use it)."""
        return await resolve_allowed(self.s, ctx, name)

    # -- whole answers -------------------------------------------------------------------------

    async def chat(self, ctx: RequestContext, req: ChatRequest) -> ChatResult:
        return await self._collected(ctx, req, lambda a, r: a.chat_stream(r))

    async def complete(self, ctx: RequestContext, req: CompletionRequest) -> ChatResult:
        return await self._collected(ctx, req, lambda a, r: a.complete_stream(r))

    async def embed(self, ctx: RequestContext, req: EmbeddingRequest) -> EmbeddingResult:
        return await self._unary(ctx, req, lambda _: self._embedding)

    async def score(self, ctx: RequestContext, req: RelevanceRequest) -> RelevanceResult:
        """Rerank and score: admitted, audited, queued and charged like embeddings."""
        return await self._unary(ctx, req, lambda _: self._relevance)

    async def count_tokens(self, ctx: RequestContext, req: ChatRequest) -> int:
        """Input tokens of a chat request: a backend's own tokenizer where one is reachable,
        otherwise the gateway's estimate. Generates nothing, so it is not admitted or queued."""
        spec = await self.resolve(ctx, req)
        for backend, upstream in rank_backends(self.catalog.serving(spec.name), self.s.clock()):
            adapter = self.adapters[backend.name]
            try:
                count = await adapter.count_chat_tokens(dataclasses.replace(req, model=upstream))
            except UpstreamError as exc:
                log.warning("tokenizer call failed", backend=backend.name, error=exc.message)
                continue
            if count is not None:
                return count
        return estimate_chat_input(req)

    async def usage_of(self, user_id: int, limits: Limits) -> UsageSnapshot:
        """A user's counters as the limit store sees them (loaded from the database first)."""
        await self.s.usage.ensure_seeded(user_id)
        return await self.s.limits.snapshot(limit_key(user_id), limits, self.s.wall())

    # -- streams -------------------------------------------------------------------------------

    async def open_chat_stream(self, ctx: RequestContext, req: ChatRequest) -> Events:
        return await self._open_stream(ctx, req, lambda a, r: a.chat_stream(r))

    async def open_complete_stream(self, ctx: RequestContext, req: CompletionRequest) -> Events:
        return await self._open_stream(ctx, req, lambda a, r: a.complete_stream(r))

    # -- internals -----------------------------------------------------------------------------

    async def resolve(self, ctx: RequestContext, req: AnyRequest) -> ModelSpec:
        """The request's model, if the caller may use it and it handles the request's kind."""
        spec = await resolve_allowed(self.s, ctx, req.model)
        check_modality(spec, req.modality)
        return spec

    async def _unary(
        self,
        ctx: RequestContext,
        req: R,
        attempt_for: Callable[[Flight], Callable[[EngineAdapter, R], Awaitable[T]]],
    ) -> T:
        spec = await self.resolve(ctx, req)
        async with open_flight(self.s, ctx, req, spec) as flight:
            result = await self.dispatch.run(flight, req, attempt_for(flight))
            result.model = req.model
            flight.end("ok", usage=result.usage, output=_result_text(result))
            return result

    async def _collected(self, ctx: RequestContext, req: G, opener: Opener[G]) -> ChatResult:
        """A non-streamed answer: the engine's stream, read whole within the attempt."""

        def attempt_for(flight: Flight) -> Callable[[EngineAdapter, G], Awaitable[ChatResult]]:
            first_of = self._first_of(flight, opener)

            async def collect(adapter: EngineAdapter, r: G) -> ChatResult:
                assembler = ChatAssembler(req.model)
                event, events = await first_of(adapter, r)
                try:
                    while True:
                        flight.see(event)
                        assembler.feed(event)
                        try:
                            event = await anext(events)
                        except StopAsyncIteration:
                            break
                finally:
                    await events.aclose()
                if assembler.usage is None:
                    raise UpstreamUnavailable("the backend sent an empty stream", ctx.backend)
                self._observe_speed(flight)
                return assembler.result()

            return collect

        return await self._unary(ctx, req, attempt_for)

    @staticmethod
    async def _embedding(adapter: EngineAdapter, req: EmbeddingRequest) -> EmbeddingResult:
        return await adapter.embed(req)

    @staticmethod
    async def _relevance(adapter: EngineAdapter, req: RelevanceRequest) -> RelevanceResult:
        return await adapter.score(req)

    def _first_event(self, flight: Flight) -> None:
        ctx = flight.ctx
        ctx.first_token_at = self.s.clock()
        if flight.backend is not None:
            flight.backend.observe_ttft(ctx.first_token_at - ctx.attempt_started_at)

    def _observe_speed(self, flight: Flight) -> None:
        """A generation finished: the backend's time per output token after the first one."""
        backend, first, usage = flight.backend, flight.ctx.first_token_at, flight.tally.usage
        if backend is None or first is None or usage is None or usage.output_tokens < 2:
            return
        backend.observe_tpot((self.s.clock() - first) / (usage.output_tokens - 1))

    def _first_of(self, flight: Flight, opener: Opener[G]) -> FirstOf[G]:
        """The attempt of a generation: the engine's stream, up to its first event."""

        async def first_of(adapter: EngineAdapter, r: G) -> tuple[StreamEvent, Events]:
            events = opener(adapter, r)
            try:
                first = await anext(events)
            except StopAsyncIteration:
                raise UpstreamUnavailable(
                    "the backend sent an empty stream", flight.ctx.backend
                ) from None
            except BaseException:
                await events.aclose()
                raise
            # The backend answered: that is what the breaker wants to know.
            self._first_event(flight)
            return first, events

        return first_of

    async def _open_stream(self, ctx: RequestContext, req: G, opener: Opener[G]) -> Events:
        spec = await self.resolve(ctx, req)
        stream = self._stream(ctx, req, spec, opener)
        # Runs the request up to its first event; what ended it before that is raised here,
        # while the client can still be answered with a status.
        await anext(stream)
        return stream

    async def _stream(
        self, ctx: RequestContext, req: G, spec: ModelSpec, opener: Opener[G]
    ) -> Events:
        """A streamed request in its flight's scope: the dispatch, then the relay. It yields
        the first event twice: once to `_open_stream`, which only waits for it, then to the
        client."""
        async with open_flight(self.s, ctx, req, spec) as flight:
            event, events = await self.dispatch.run(flight, req, self._first_of(flight, opener))
            try:
                yield event
                while True:
                    flight.see(event)
                    if isinstance(event, Done):
                        flight.end("ok")
                        self._observe_speed(flight)
                    yield event
                    if self.s.draining():
                        raise Overloaded(
                            "the gateway is shutting down and its grace period for open "
                            "streams is over; retry the request"
                        )
                    try:
                        event = await anext(events)
                    except StopAsyncIteration:
                        break
            except MindRouterError as exc:
                flight.end("error", exc)
                if isinstance(exc, UpstreamError) and flight.backend is not None:
                    self.dispatch.attempt_failed(flight.backend, exc)
                yield StreamFailed(exc)
            except Exception as exc:
                log.exception("stream relay failed", backend=flight.ctx.backend)
                error = InternalError(f"the stream failed inside the gateway: {exc}")
                flight.end("error", error)
                yield StreamFailed(error)
            finally:
                await events.aclose()
