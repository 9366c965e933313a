"""The gateway's request path from a decoded canonical request to a backend and back.

    authenticate → resolve model → Flight.open (admit, audit, fair gate)
        → dispatch with failover before the first byte → relay → Flight.close (account)

Streams connect and wait for their first event before anything is sent to the client, so a
failure up to that point can still be retried on another backend or reported with a status.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from typing import TypeVar

import orjson
import structlog

from mindrouter.backends.base import EngineAdapter
from mindrouter.canonical import (
    AnyRequest,
    ChatRequest,
    ChatResult,
    CompletionRequest,
    Done,
    EmbeddingRequest,
    EmbeddingResult,
    ReasoningDelta,
    RelevanceRequest,
    RelevanceResult,
    StreamEvent,
    StreamFailed,
    TextDelta,
    ToolCallArgs,
    ToolCallStart,
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
from mindrouter.pipeline.fit import fit_context
from mindrouter.pipeline.flight import Flight, Status
from mindrouter.pipeline.outcome import record_outcome
from mindrouter.pipeline.services import Services
from mindrouter.pipeline.usage_sync import limit_key
from mindrouter.routing.catalog import BackendState, ModelSpec, check_modality
from mindrouter.routing.select import rank_backends, rank_candidates
from mindrouter.stores.limits import Limits, UsageSnapshot
from mindrouter.tokens import estimate_chat_input

R = TypeVar("R", ChatRequest, CompletionRequest, EmbeddingRequest, RelevanceRequest)
T = TypeVar("T", ChatResult, EmbeddingResult, RelevanceResult)
Events = AsyncGenerator[StreamEvent, None]


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
        # The last routing decisions and the scores behind them, for the admin queue view.
        self.decisions: deque[dict[str, object]] = deque(maxlen=50)

    async def authenticate(self, ctx: RequestContext, headers: Mapping[str, str]) -> None:
        ctx.principal = await self.s.authenticator.authenticate(headers)
        structlog.contextvars.bind_contextvars(user=ctx.principal.user_name)

    # -- unary ---------------------------------------------------------------------------------

    async def chat(self, ctx: RequestContext, req: ChatRequest) -> ChatResult:
        return await self._unary(ctx, req, lambda a, r: a.chat(r))

    async def complete(self, ctx: RequestContext, req: CompletionRequest) -> ChatResult:
        return await self._unary(ctx, req, lambda a, r: a.complete(r))

    async def embed(self, ctx: RequestContext, req: EmbeddingRequest) -> EmbeddingResult:
        return await self._unary(ctx, req, lambda a, r: a.embed(r))

    async def score(self, ctx: RequestContext, req: RelevanceRequest) -> RelevanceResult:
        """Rerank and score: admitted, audited, queued and charged like embeddings."""
        return await self._unary(ctx, req, lambda a, r: a.score(r))

    async def count_tokens(self, ctx: RequestContext, req: ChatRequest) -> int:
        """Input tokens of a chat request: a backend's own tokenizer where one is reachable,
        otherwise the gateway's estimate. Generates nothing, so it is not admitted or queued."""
        spec = self.resolve(req)
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

    def resolve(self, req: AnyRequest) -> ModelSpec:
        spec = self.catalog.resolve(req.model)
        check_modality(spec, req.modality)
        return spec

    def _plan(self, flight: Flight) -> list[tuple[BackendState, str]]:
        spec = flight.spec
        ranked = rank_candidates(
            self.catalog.serving(spec.name),
            self.s.clock(),
            spec.name,
            self.s.score_weights,
            requires=flight.requires,
            output_tokens=flight.est_output,
        )
        if not ranked:
            raise Overloaded(f"no healthy backend is serving model '{spec.name}' right now")
        self.decisions.append(
            {
                "model": spec.name,
                "at": time.time(),
                "requires": sorted(flight.requires),
                "ranked": [
                    {
                        "backend": c.backend.name,
                        "score": round(c.score, 2),
                        "predicted_s": None if c.predicted_s is None else round(c.predicted_s, 3),
                        "full": c.backend.full,
                    }
                    for c in ranked
                ],
            }
        )
        return [(c.backend, c.upstream) for c in ranked[: self.s.max_attempts]]

    async def _unary(
        self, ctx: RequestContext, req: R, call: Callable[[EngineAdapter, R], Awaitable[T]]
    ) -> T:
        spec = self.resolve(req)
        flight = Flight(self.s, ctx, req, spec)
        await flight.open()
        status: Status = "error"
        result: T | None = None
        error: MindRouterError | None = None
        try:
            result = await self._try_backends(ctx, flight, spec, req, call)
            result.model = req.model
            status = "ok"
            return result
        except MindRouterError as exc:
            error = exc
            raise
        except asyncio.CancelledError:
            status = "cancelled"
            raise
        except Exception as exc:
            error = InternalError(f"the request failed inside the gateway: {exc}")
            raise
        finally:
            usage = result.usage if result is not None else None
            text = _result_text(result) if result is not None else None
            await flight.close(status, usage, text, error)
            record_outcome(self.s.metrics, ctx, req.model, status, usage, error=error)

    async def _try_backends(
        self,
        ctx: RequestContext,
        flight: Flight,
        spec: ModelSpec,
        req: R,
        call: Callable[[EngineAdapter, R], Awaitable[T]],
    ) -> T:
        last: UpstreamError | None = None
        for backend, upstream in self._plan(flight):
            if not await self._may_try(backend):
                continue
            self._start_attempt(ctx, flight, backend)
            adapter = self.adapters[backend.name]
            try:
                result = await call(adapter, await self._fit(flight, req, upstream, adapter))
            except UpstreamRejected:
                self._verdict_ok(backend)  # it answered; the request was at fault
                raise
            except UpstreamError as exc:
                last = exc
                self._attempt_failed(backend, exc)
                continue
            except BaseException:
                self._no_verdict(backend)
                raise
            self._verdict_ok(backend)
            return result
        raise last or self._all_refused(spec)

    async def _fit(self, flight: Flight, req: R, upstream: str, adapter: EngineAdapter) -> R:
        """The request as this backend gets it: its model name, and its output fitted. Called
        with the backend slot taken; nothing goes to the backend before the audit record."""
        await flight.recorded()
        named = dataclasses.replace(req, model=upstream)
        if isinstance(named, EmbeddingRequest | RelevanceRequest):
            return named
        fitted = await fit_context(named, flight.spec, flight.est_input, adapter)
        assert isinstance(fitted, type(named))
        return fitted

    async def _may_try(self, backend: BackendState) -> bool:
        """Whether an attempt may go to `backend` now: always while its breaker is closed; in
        half-open state only as the one probe, claimed here (and, shared, across processes)."""
        breaker = backend.breaker
        now = self.s.clock()
        state = breaker.state(now)
        if state != "half_open":
            return state == "closed"
        breaker.on_attempt(now)
        if self.s.breakers is None:
            return True
        return await self.s.breakers.claim_probe(backend)

    @staticmethod
    def _all_refused(spec: ModelSpec) -> Overloaded:
        return Overloaded(
            f"every backend serving model '{spec.name}' is failing (circuit breaker open); "
            "try again shortly"
        )

    def _observe_speed(self, ctx: RequestContext, flight: Flight, usage: Usage | None) -> None:
        """A stream finished: the backend's time per output token after the first one."""
        backend, first = flight.backend, ctx.first_token_at
        if backend is None or first is None or usage is None or usage.output_tokens < 2:
            return
        backend.observe_tpot((self.s.clock() - first) / (usage.output_tokens - 1))

    def _start_attempt(self, ctx: RequestContext, flight: Flight, backend: BackendState) -> None:
        flight.take(backend)  # the breaker's probe, if any, was claimed by _may_try
        now = self.s.clock()
        if ctx.attempts == 0:
            own = now - ctx.received_at - ctx.queued_s
            self.s.metrics.overhead.labels(ctx.dialect).observe(max(0.0, own))
        ctx.attempts += 1
        ctx.attempt_started_at = now

    def _verdict_ok(self, backend: BackendState) -> None:
        """The backend answered (even if only to refuse the request)."""
        backend.breaker.on_success()
        self._tell_others(backend)

    def _no_verdict(self, backend: BackendState) -> None:
        """The attempt ended without saying anything about the backend; a probe is given back."""
        backend.breaker.on_abandoned()
        self._tell_others(backend)

    def _tell_others(self, backend: BackendState) -> None:
        """A breaker event worth sharing (it recorded something to push): exchange now rather
        than at the next interval. Successes of a closed breaker record nothing."""
        if self.s.breakers is not None and backend.breaker.unsent:
            self.s.breakers.changed()

    def _attempt_failed(self, backend: BackendState, exc: UpstreamError) -> None:
        backend.breaker.on_failure(self.s.clock())
        self._tell_others(backend)
        backend.last_error = exc.message
        log.warning("backend attempt failed", backend=backend.name, error=exc.message)

    async def _open_stream(
        self, ctx: RequestContext, req: R, opener: Callable[[EngineAdapter, R], Events]
    ) -> Events:
        spec = self.resolve(req)
        flight = Flight(self.s, ctx, req, spec)
        await flight.open()
        try:
            last: UpstreamError | None = None
            for backend, upstream in self._plan(flight):
                if not await self._may_try(backend):
                    continue
                self._start_attempt(ctx, flight, backend)
                adapter = self.adapters[backend.name]
                try:
                    events = opener(adapter, await self._fit(flight, req, upstream, adapter))
                except BaseException:
                    self._no_verdict(backend)
                    raise
                try:
                    first = await anext(events)
                except StopAsyncIteration:
                    last = UpstreamUnavailable("the backend sent an empty stream", backend.name)
                except UpstreamRejected:
                    self._verdict_ok(backend)
                    await events.aclose()
                    raise
                except UpstreamError as exc:
                    last = exc
                except BaseException:
                    self._no_verdict(backend)
                    await events.aclose()
                    raise
                else:
                    # The backend answered: that is what the breaker wants to know.
                    self._verdict_ok(backend)
                    ctx.first_token_at = self.s.clock()
                    backend.observe_ttft(ctx.first_token_at - ctx.attempt_started_at)
                    return self._relay(ctx, flight, req.model, first, events)
                # The verdict first: closing the stream may fail or be cancelled too.
                self._attempt_failed(backend, last)
                await events.aclose()
            raise last or self._all_refused(spec)
        except BaseException as exc:
            cancelled = isinstance(exc, asyncio.CancelledError)
            err = exc if isinstance(exc, MindRouterError) else None
            await flight.close("cancelled" if cancelled else "error", None, None, err)
            record_outcome(
                self.s.metrics,
                ctx,
                req.model,
                "cancelled" if cancelled else "error",
                None,
                error=err,
            )
            raise

    async def _relay(
        self, ctx: RequestContext, flight: Flight, model: str, first: StreamEvent, events: Events
    ) -> Events:
        usage: Usage | None = None
        status: Status = "cancelled"
        error: MindRouterError | None = None
        pieces: list[str] = []
        produced = 0
        event = first
        try:
            while True:
                if isinstance(event, TextDelta | ReasoningDelta | ToolCallArgs):
                    produced += 1
                    flight.charge_output(1)
                    if isinstance(event, TextDelta):
                        pieces.append(event.text)
                    elif isinstance(event, ToolCallArgs):
                        pieces.append(event.fragment)
                elif isinstance(event, ToolCallStart):
                    pieces.append(f"\n[tool call {event.name}] ")
                elif isinstance(event, Done):
                    usage = event.usage
                    status = "ok"
                    self._observe_speed(ctx, flight, usage)
                yield event
                if self.s.draining():
                    raise Overloaded(
                        "the gateway is shutting down and its grace period for open streams "
                        "is over; retry the request"
                    )
                try:
                    event = await anext(events)
                except StopAsyncIteration:
                    break
        except MindRouterError as exc:
            status, error = "error", exc
            if isinstance(exc, UpstreamError) and flight.backend is not None:
                self._attempt_failed(flight.backend, exc)
            yield StreamFailed(exc)
        except Exception as exc:
            log.exception("stream relay failed", backend=ctx.backend)
            status, error = "error", InternalError(f"the stream failed inside the gateway: {exc}")
            yield StreamFailed(error)
        finally:
            await events.aclose()
            if usage is None and produced:
                # The stream broke off: charge what was generated, one token per chunk.
                usage = Usage(input_tokens=flight.est_input, output_tokens=produced, estimated=True)
            await flight.close(status, usage, "".join(pieces), error)
            record_outcome(self.s.metrics, ctx, model, status, usage, error=error)
