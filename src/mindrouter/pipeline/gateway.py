"""The gateway's request path from a decoded canonical request to a backend and back.

Stages (DESIGN.md §1) that exist so far: resolve the model, check modality, pick a backend,
dispatch with failover before the first byte, relay the stream. Authentication, admission,
audit, fair scheduling and accounting plug in here as they are built.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import TypeVar

from mindrouter.backends.base import EngineAdapter
from mindrouter.canonical import (
    AnyRequest,
    ChatRequest,
    ChatResult,
    CompletionRequest,
    Done,
    EmbeddingRequest,
    EmbeddingResult,
    StreamEvent,
    StreamFailed,
    Usage,
)
from mindrouter.errors import (
    InternalError,
    MindRouterError,
    Overloaded,
    UpstreamError,
    UpstreamRejected,
    UpstreamUnavailable,
)
from mindrouter.observability.logging import log
from mindrouter.pipeline.context import RequestContext
from mindrouter.routing.catalog import BackendState, Catalog, ModelSpec, check_modality
from mindrouter.routing.select import rank_backends
from mindrouter.tokens import estimate_chat_input

R = TypeVar("R", ChatRequest, CompletionRequest, EmbeddingRequest)
T = TypeVar("T")


class Gateway:
    def __init__(
        self, catalog: Catalog, adapters: dict[str, EngineAdapter], *, max_attempts: int = 3
    ) -> None:
        self.catalog = catalog
        self.adapters = adapters
        self.max_attempts = max_attempts

    # -- unary ---------------------------------------------------------------------------------

    async def chat(self, ctx: RequestContext, req: ChatRequest) -> ChatResult:
        return await self._unary(ctx, req, lambda a, r: a.chat(r))

    async def complete(self, ctx: RequestContext, req: CompletionRequest) -> ChatResult:
        return await self._unary(ctx, req, lambda a, r: a.complete(r))

    async def embed(self, ctx: RequestContext, req: EmbeddingRequest) -> EmbeddingResult:
        return await self._unary(ctx, req, lambda a, r: a.embed(r))

    # -- streams -------------------------------------------------------------------------------

    async def open_chat_stream(
        self, ctx: RequestContext, req: ChatRequest
    ) -> AsyncGenerator[StreamEvent, None]:
        """Connects and waits for the first event, so that failures before any byte reached the
        client can still become an HTTP error status (or a retry elsewhere)."""
        return await self._open_stream(ctx, req, lambda a, r: a.chat_stream(r))

    async def open_complete_stream(
        self, ctx: RequestContext, req: CompletionRequest
    ) -> AsyncGenerator[StreamEvent, None]:
        return await self._open_stream(ctx, req, lambda a, r: a.complete_stream(r))

    async def count_tokens(self, ctx: RequestContext, req: ChatRequest) -> int:
        """Input tokens of a chat request: a backend's own tokenizer where one is reachable,
        otherwise the gateway's estimate."""
        spec = self.resolve(req)
        for backend, upstream in rank_backends(self.catalog.serving(spec.name)):
            adapter = self.adapters[backend.name]
            try:
                count = await adapter.count_chat_tokens(dataclasses.replace(req, model=upstream))
            except UpstreamError as exc:
                log.warning("tokenizer call failed", backend=backend.name, error=exc.message)
                continue
            if count is not None:
                return count
        return estimate_chat_input(req)

    # -- internals -----------------------------------------------------------------------------

    def resolve(self, req: AnyRequest) -> ModelSpec:
        spec = self.catalog.resolve(req.model)
        check_modality(spec, req.modality)
        return spec

    def _plan(self, spec: ModelSpec) -> list[tuple[BackendState, str]]:
        ranked = rank_backends(self.catalog.serving(spec.name))
        if not ranked:
            raise Overloaded(f"no healthy backend is serving model '{spec.name}' right now")
        return ranked[: self.max_attempts]

    async def _unary(
        self, ctx: RequestContext, req: R, call: Callable[[EngineAdapter, R], Awaitable[T]]
    ) -> T:
        spec = self.resolve(req)
        last: MindRouterError | None = None
        for backend, upstream in self._plan(spec):
            ctx.attempts += 1
            ctx.backend = backend.name
            backend.in_flight += 1
            try:
                result = await call(
                    self.adapters[backend.name], dataclasses.replace(req, model=upstream)
                )
            except UpstreamRejected:
                raise
            except UpstreamError as exc:
                last = exc
                log.warning("backend attempt failed", backend=backend.name, error=exc.message)
                continue
            finally:
                backend.in_flight -= 1
            self.catalog.mark_used(spec.name, time.monotonic())
            if isinstance(result, (ChatResult, EmbeddingResult)):
                result.model = req.model
            self._log_done(ctx, req.model, "ok", getattr(result, "usage", None))
            return result
        assert last is not None
        self._log_done(ctx, req.model, "error", None, last)
        raise last

    async def _open_stream(
        self,
        ctx: RequestContext,
        req: R,
        opener: Callable[[EngineAdapter, R], AsyncGenerator[StreamEvent, None]],
    ) -> AsyncGenerator[StreamEvent, None]:
        spec = self.resolve(req)
        last: MindRouterError | None = None
        for backend, upstream in self._plan(spec):
            ctx.attempts += 1
            ctx.backend = backend.name
            backend.in_flight += 1
            events = opener(self.adapters[backend.name], dataclasses.replace(req, model=upstream))
            try:
                first = await anext(events)
            except StopAsyncIteration:
                first_error: BaseException = UpstreamUnavailable("the backend sent an empty stream")
            except UpstreamRejected:
                backend.in_flight -= 1
                await events.aclose()
                raise
            except BaseException as exc:
                first_error = exc
            else:
                ctx.first_token_at = time.monotonic()
                self.catalog.mark_used(spec.name, ctx.first_token_at)
                return self._relay(ctx, req.model, backend, first, events)
            backend.in_flight -= 1
            await events.aclose()
            if not isinstance(first_error, UpstreamError):
                raise first_error
            last = first_error
            log.warning("backend attempt failed", backend=backend.name, error=first_error.message)
        assert last is not None
        self._log_done(ctx, req.model, "error", None, last)
        raise last

    async def _relay(
        self,
        ctx: RequestContext,
        model: str,
        backend: BackendState,
        first: StreamEvent,
        events: AsyncGenerator[StreamEvent, None],
    ) -> AsyncGenerator[StreamEvent, None]:
        usage: Usage | None = None
        outcome = "cancelled"
        try:
            yield first
            async for event in events:
                if isinstance(event, Done):
                    usage = event.usage
                    outcome = "ok"
                yield event
        except MindRouterError as exc:
            outcome = "error"
            yield StreamFailed(exc)
        except Exception as exc:
            outcome = "error"
            log.exception("stream relay failed", backend=backend.name)
            yield StreamFailed(InternalError(f"the stream failed inside the gateway: {exc}"))
        finally:
            backend.in_flight -= 1
            await events.aclose()
            self._log_done(ctx, model, outcome, usage)

    def _log_done(
        self,
        ctx: RequestContext,
        model: str,
        outcome: str,
        usage: Usage | None,
        error: MindRouterError | None = None,
    ) -> None:
        log.info(
            "request finished",
            endpoint=ctx.endpoint,
            dialect=ctx.dialect,
            model=model,
            backend=ctx.backend,
            attempts=ctx.attempts,
            outcome=outcome,
            input_tokens=usage.input_tokens if usage else None,
            output_tokens=usage.output_tokens if usage else None,
            error=error.message if error else None,
            duration_ms=round((time.monotonic() - ctx.received_at) * 1000, 2),
        )
