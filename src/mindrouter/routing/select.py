"""Pick a backend for a request: hard constraints first, then a soft score.

Hard: healthy, not draining, breaker allowing, serving the model, with every feature the request
needs (structured output). Soft (higher is better): the model already loaded on the backend
dominates (a cold load costs tens of seconds), then free capacity, admin priority, faster GPU
class, a shorter engine queue and a shorter predicted time for the request as tie-breakers.

The predicted time is the backend's recent time to first token plus its recent time per output
token times the request's expected output (moving averages of streamed requests, not their total
time, which depends on how long each answer was). It scores on a log scale: a backend predicted
to be twice as fast gains `latency` points, whatever the request's size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from mindrouter.routing.catalog import BackendState

# Faster GPU classes score higher; unknown classes score as the slowest.
GPU_SCORES: dict[str, float] = {
    "B200": 10.0,
    "H200": 9.0,
    "H100": 8.0,
    "A100": 6.0,
    "L40S": 5.0,
    "A6000": 4.0,
    "L4": 3.0,
    "RTX8000": 2.0,
    "RTX 8000": 2.0,
}


@dataclass(frozen=True, slots=True)
class ScoreWeights:
    """The soft score's weights (configuration key `routing_weights`)."""

    loaded: float = 100.0  # when the model is resident on the backend
    utilisation: float = 20.0  # times the free fraction of the backend's slots
    priority: float = 5.0  # per admin priority point
    gpu: float = 1.0  # times the GPU class score (GPU_SCORES: 0 to 10)
    latency: float = 2.0  # per halving of the predicted time of the request
    queue: float = 2.0  # per request waiting in the engine's own queue

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{f.name}: a weight must be a finite number ≥ 0, got {value}")


DEFAULT_WEIGHTS = ScoreWeights()
# Predicted times below this score as this: a cached ttft of a few milliseconds says nothing
# about speed that a tenth of a second would not.
MIN_PREDICTED_S = 0.1


def predicted_seconds(b: BackendState, output_tokens: int) -> float | None:
    """How long the request should take on `b` from its recent speed; None before any sample."""
    if b.ttft_ema is None and b.tpot_ema is None:
        return None
    return (b.ttft_ema or 0.0) + (b.tpot_ema or 0.0) * output_tokens


def score(
    b: BackendState, model: str, w: ScoreWeights = DEFAULT_WEIGHTS, output_tokens: int = 256
) -> float:
    free = max(0.0, 1.0 - b.load / b.max_concurrent)
    total = w.utilisation * free + w.priority * b.priority - w.queue * b.waiting
    if model in b.loaded:
        total += w.loaded
    total += w.gpu * GPU_SCORES.get((b.gpu or "").upper(), 0.0)
    predicted = predicted_seconds(b, output_tokens)
    if predicted is not None:
        total -= w.latency * math.log2(max(predicted, MIN_PREDICTED_S) / MIN_PREDICTED_S)
    return total


def rank_backends(
    candidates: list[tuple[BackendState, str]],
    now: float = 0.0,
    model: str | None = None,
    weights: ScoreWeights = DEFAULT_WEIGHTS,
    *,
    requires: frozenset[str] = frozenset(),
    output_tokens: int = 256,
) -> list[tuple[BackendState, str]]:
    """Candidates that pass the hard constraints: those with a free slot first, each group best
    score first."""
    usable = [(b, up) for b, up in candidates if b.usable(now) and requires <= b.features]

    def key(item: tuple[BackendState, str]) -> tuple[bool, float, str]:
        b = item[0]
        return (b.full, -score(b, model or "", weights, output_tokens), b.name)

    return sorted(usable, key=key)
