"""Stage 12, its last step: a request's metrics and the one log line that says how it ended.

Written by the clean-up of every request that was scheduled (`open_flight` in `flight.py`),
after its accounting, however it ended (an answer, an error, a stream that broke off or that the
client left). The outcome it leaves on the context tells the error handlers at the edge that the
request is accounted for; one refused before it was scheduled is logged there as a refusal.
"""

from __future__ import annotations

import time
from typing import Literal

from mindrouter.canonical import Usage
from mindrouter.errors import MindRouterError
from mindrouter.observability.logging import log
from mindrouter.observability.metrics import Metrics
from mindrouter.pipeline.context import RequestContext

# How a request ended, as its audit record and its metrics say.
Status = Literal["ok", "error", "cancelled"]


def record_outcome(
    m: Metrics,
    ctx: RequestContext,
    model: str,
    outcome: str,
    usage: Usage | None,
    *,
    error: MindRouterError | None = None,
) -> None:
    ctx.outcome = outcome
    backend = ctx.backend or "none"
    elapsed = time.monotonic() - ctx.received_at
    m.requests.labels(ctx.dialect, model, backend, outcome).inc()
    if error is not None:
        m.errors.labels(ctx.dialect, model, error.kind).inc()
    m.latency.labels(ctx.dialect, model).observe(elapsed)
    if ctx.first_token_at is not None:
        m.ttft.labels(model, backend).observe(ctx.first_token_at - ctx.received_at)
    if ctx.attempts:
        m.queue_wait.labels(model).observe(ctx.queued_s)
    if usage is not None:
        m.tokens.labels(model, "input").inc(usage.input_tokens)
        m.tokens.labels(model, "output").inc(usage.output_tokens)
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
        duration_ms=round(elapsed * 1000, 2),
    )
