"""The gateway's request path from a decoded canonical request to a backend and back.

    authenticate (`identity/`) → resolve the model (`model_access.py`)
        → open_flight (`flight.py`: estimate, admit, audit, the fair gate)
        → Dispatcher.run (`dispatch.py`: select, fit, the attempt loop)
        → relay (`relay.py`) → the flight's clean-up (account)

The flight's scope is the request's: a unary call holds it around the dispatch, a stream from the
dispatch to the end of the relay.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

import structlog

from mindrouter import canonical
from mindrouter.backends.base import EngineAdapter
from mindrouter.errors import UpstreamError
from mindrouter.observability.logging import log
from mindrouter.pipeline import relay
from mindrouter.pipeline.admit import usage_of
from mindrouter.pipeline.context import RequestContext
from mindrouter.pipeline.dispatch import Dispatcher
from mindrouter.pipeline.flight import Flight, open_flight
from mindrouter.pipeline.model_access import resolve_allowed, visible_models
from mindrouter.pipeline.services import Services
from mindrouter.pipeline.views import RoutingViews
from mindrouter.routing.catalog import ModelSpec, check_modality
from mindrouter.routing.select import rank_backends
from mindrouter.stores.limits import Limits, UsageSnapshot
from mindrouter.tokens import estimate_chat_input

R = TypeVar("R", bound=canonical.AnyRequest)
G = TypeVar("G", bound=canonical.GenerationRequest)
T = TypeVar("T", canonical.ChatResult, canonical.EmbeddingResult, canonical.RelevanceResult)


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

    async def generate(self, ctx: RequestContext, req: G) -> canonical.ChatResult:
        """A whole answer to a chat or completion request: the engine's stream, read whole
        within the attempt, so failover and accounting are those of a stream."""
        return await self._unary(
            ctx, req, lambda flight: relay.collector(self.s, flight, req.model, _engine_stream)
        )

    async def embed(
        self, ctx: RequestContext, req: canonical.EmbeddingRequest
    ) -> canonical.EmbeddingResult:
        return await self._unary(ctx, req, lambda _: self._embedding)

    async def score(
        self, ctx: RequestContext, req: canonical.RelevanceRequest
    ) -> canonical.RelevanceResult:
        """Rerank and score: admitted, audited, queued and charged like embeddings."""
        return await self._unary(ctx, req, lambda _: self._relevance)

    async def count_tokens(self, ctx: RequestContext, req: canonical.ChatRequest) -> int:
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
        return await usage_of(self.s, user_id, limits)

    # -- streams -------------------------------------------------------------------------------

    async def open_stream(self, ctx: RequestContext, req: G) -> canonical.Events:
        """A streamed answer, run up to its first event: what ended the request before that is
        raised here, while the client can still be answered with a status."""
        spec = await self.resolve(ctx, req)
        stream = relay.stream(self.s, self.dispatch, ctx, req, spec, opener=_engine_stream)
        await anext(stream)
        return stream

    # -- internals -----------------------------------------------------------------------------

    async def resolve(self, ctx: RequestContext, req: canonical.AnyRequest) -> ModelSpec:
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
            flight.answered(result)
            return result

    @staticmethod
    async def _embedding(
        adapter: EngineAdapter, req: canonical.EmbeddingRequest
    ) -> canonical.EmbeddingResult:
        return await adapter.embed(req)

    @staticmethod
    async def _relevance(
        adapter: EngineAdapter, req: canonical.RelevanceRequest
    ) -> canonical.RelevanceResult:
        return await adapter.score(req)


def _engine_stream(adapter: EngineAdapter, req: canonical.GenerationRequest) -> canonical.Events:
    """What the engine streams for a chat or a completion request."""
    if isinstance(req, canonical.ChatRequest):
        return adapter.chat_stream(req)
    return adapter.complete_stream(req)
