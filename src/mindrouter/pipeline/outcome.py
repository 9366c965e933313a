"""The last word on a request: its metrics and the one log line that says how it ended.

Called exactly once per request that reached the pipeline, after `Flight.close` has done the
accounting, from every place a request can end (a unary answer, a stream that never opened, a
relayed stream). `ctx.recorded` tells the error handlers at the edge that it has been done.
"""

from __future__ import annotations

import time

from mindrouter.canonical import Usage
from mindrouter.errors import MindRouterError
from mindrouter.observability.logging import log
from mindrouter.observability.metrics import Metrics
from mindrouter.pipeline.context import RequestContext


def record_outcome(
    m: Metrics,
    ctx: RequestContext,
    model: str,
    outcome: str,
    usage: Usage | None,
    *,
    error: MindRouterError | None = None,
) -> None:
    ctx.recorded = True
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
