"""Stages 8–10: choose backends (select, `routing/select.py`), fit the request to each (`fit.py`),
and try them in turn (dispatch; the adapter encodes for the engine, `backends/`) — one loop for
every kind of call.

An *attempt* is whatever must succeed before the request is committed to a backend: a stream's
first event, a whole non-streamed answer (read from a stream), an embedding. Until then every
`UpstreamError` is retried on the next backend; an `UpstreamRejected` (the request was at fault)
is not. Each attempt feeds the backend's circuit breaker: a success or a rejection closes it, a
failure counts, an attempt that ended without a verdict (the client left) gives a probe back.

A request gives up only when `max_attempts` backends were tried, when no backend it has not tried
could still serve it (every one left is unhealthy, draining or lacks a feature it needs), or
when its capacity wait (`capacity_wait_s` from entering the queue) is spent. Until then, if every
backend left is behind an open breaker or another request's probe, it waits — holding no slot —
for a breaker to half-open (a known time), for a verdict of this process, or at most
`RECHECK_S` for what it cannot be told of (another process's probe, a health check).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TypeVar

from mindrouter.backends.base import EngineAdapter
from mindrouter.canonical import (
    AnyRequest,
    EmbeddingRequest,
    RelevanceRequest,
)
from mindrouter.errors import Overloaded, UpstreamError, UpstreamRejected
from mindrouter.observability.logging import log
from mindrouter.pipeline.fit import fit_context
from mindrouter.pipeline.flight import Flight
from mindrouter.pipeline.services import Services
from mindrouter.routing.catalog import BackendState, ModelSpec
from mindrouter.routing.select import Candidate, rank_candidates

R = TypeVar("R", bound=AnyRequest)
X = TypeVar("X")
Attempt = Callable[[EngineAdapter, R], Awaitable[X]]

# The longest a request waiting for a backend sleeps without looking again.
RECHECK_S = 0.5


class Dispatcher:
    def __init__(self, services: Services) -> None:
        self.s = services
        # The last routing decisions and the scores behind them, for the admin queue view.
        self.decisions: deque[dict[str, object]] = deque(maxlen=50)
        # Resolved (and replaced) whenever this process learns a breaker verdict.
        self._news: asyncio.Future[None] | None = None

    async def run(self, flight: Flight, req: R, attempt: Attempt[R, X]) -> X:
        ctx, spec = flight.ctx, flight.spec
        tried: set[str] = set()
        last: UpstreamError | None = None
        while True:
            for backend, upstream in self._plan(flight, tried):
                if ctx.attempts >= self.s.max_attempts:
                    break
                if not await self._may_try(backend):
                    continue
                tried.add(backend.name)
                self._start_attempt(flight, backend)
                adapter = self.s.adapters[backend.name]
                try:
                    result = await attempt(adapter, await self._fit(flight, req, upstream, adapter))
                except UpstreamRejected:
                    self.verdict_ok(backend)  # it answered; the request was at fault
                    raise
                except UpstreamError as exc:
                    last = exc
                    self.attempt_failed(backend, exc)
                    continue
                except BaseException:
                    self._no_verdict(backend)
                    raise
                self.verdict_ok(backend)
                return result
            waitable = self._waitable(flight, tried)
            now = self.s.clock()
            if ctx.attempts >= self.s.max_attempts or not waitable or now >= flight.deadline:
                raise last or self._nothing_usable(spec)
            flight.drop()  # nothing is held while waiting
            self.s.gate.release(spec.name)
            await self._wait(waitable, flight.deadline - now)

    # -- choosing ----------------------------------------------------------------------------

    def _plan(self, flight: Flight, tried: set[str]) -> list[tuple[BackendState, str]]:
        """The backends to try now, best first: usable and not tried yet."""
        spec = flight.spec
        serving = [(b, up) for b, up in self.s.catalog.serving(spec.name) if b.name not in tried]
        ranked = rank_candidates(
            serving,
            self.s.clock(),
            spec.name,
            self.s.score_weights,
            requires=flight.requires,
            output_tokens=flight.est_output,
        )
        if ranked and not tried:
            self._log_decision(flight, ranked)
        return [(c.backend, c.upstream) for c in ranked]

    def _log_decision(self, flight: Flight, ranked: list[Candidate]) -> None:
        self.decisions.append(
            {
                "model": flight.spec.name,
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

    def _waitable(self, flight: Flight, tried: set[str]) -> list[BackendState]:
        """Backends not tried yet that could serve the request once their breaker lets them:
        healthy, not draining, with every feature it needs."""
        return [
            b
            for b, _ in self.s.catalog.serving(flight.spec.name)
            if b.name not in tried
            and b.healthy
            and not b.draining
            and flight.requires <= b.features
        ]

    async def _wait(self, backends: list[BackendState], remaining: float) -> None:
        """Until a breaker of `backends` may have changed, `remaining` seconds at most."""
        now = self.s.clock()
        opens = [b.breaker.open_until - now for b in backends if b.breaker.open_until > now]
        delay = min([remaining, RECHECK_S, *opens])
        if self._news is None or self._news.done():
            self._news = asyncio.get_running_loop().create_future()
        await asyncio.wait((self._news,), timeout=max(0.0, delay))

    async def _may_try(self, backend: BackendState) -> bool:
        """Whether an attempt may go to `backend` now: always while its breaker is closed; in
        half-open state only as the one probe, claimed here (and, shared, across processes)."""
        breaker = backend.breaker
        now = self.s.clock()
        state = breaker.state(now)
        if state != "half_open":
            return state == "closed"
        breaker.on_attempt(now)
        return await self.s.breakers.claim_probe(backend)

    @staticmethod
    def _nothing_usable(spec: ModelSpec) -> Overloaded:
        return Overloaded(
            f"no backend serving model '{spec.name}' could take the request (unhealthy, "
            "draining or behind an open circuit breaker); try again shortly"
        )

    # -- one attempt -------------------------------------------------------------------------

    def _start_attempt(self, flight: Flight, backend: BackendState) -> None:
        ctx = flight.ctx
        flight.take(backend)  # the breaker's probe, if any, was claimed by _may_try
        now = self.s.clock()
        if ctx.attempts == 0:
            own = now - ctx.received_at - ctx.queued_s
            self.s.metrics.overhead.labels(ctx.dialect).observe(max(0.0, own))
        ctx.attempts += 1
        ctx.attempt_started_at = now

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

    # -- breaker bookkeeping -----------------------------------------------------------------

    def verdict_ok(self, backend: BackendState) -> None:
        """The backend answered (even if only to refuse the request)."""
        was_open = backend.breaker.failures >= backend.breaker.threshold
        backend.breaker.on_success()
        self._tell_others(backend)
        if was_open:
            # Its slots are usable again: requests waiting in the fair gate need not poll.
            for model in backend.serves:
                self.s.gate.release(model)

    def attempt_failed(self, backend: BackendState, exc: UpstreamError) -> None:
        backend.breaker.on_failure(self.s.clock())
        self._tell_others(backend)
        backend.last_error = exc.message
        log.warning("backend attempt failed", backend=backend.name, error=exc.message)

    def _no_verdict(self, backend: BackendState) -> None:
        """The attempt ended without saying anything about the backend; a probe is given back."""
        backend.breaker.on_abandoned()
        self._tell_others(backend)

    def _tell_others(self, backend: BackendState) -> None:
        """Wake the requests waiting here for a backend; and share a breaker event worth sharing
        (one that recorded something to push) now rather than at the next interval."""
        news, self._news = self._news, None
        if news is not None and not news.done():
            news.set_result(None)
        if backend.breaker.unsent:
            self.s.breakers.changed()
