"""Pick a backend for a request: hard constraints first, then a soft score.

Hard: healthy, not draining, breaker allowing, serving the model, with every feature the request
needs (structured output). Soft (higher is better): the model already loaded on the backend
dominates (a cold load costs tens of seconds), then free capacity, admin priority, faster GPU
class, a shorter engine queue and a shorter predicted time for the request as tie-breakers.

The predicted time is the backend's recent time to first token plus its recent time per output
token times the request's expected output (moving averages of streamed requests, not their total
time, which depends on how long each answer was). It scores against the fastest candidate on a
log scale: a backend predicted to take twice as long as the fastest loses `latency` points,
whatever the request's size. A backend not measured yet loses nothing, so it gets requests and
is measured.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
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
    latency: float = 2.0  # less per doubling of the predicted time over the fastest candidate's
    queue: float = 2.0  # per request waiting in the engine's own queue

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{f.name}: a weight must be a finite number ≥ 0, got {value}")


DEFAULT_WEIGHTS = ScoreWeights()
# Predicted times below this compare as this: between a first token in 5 ms and one in 20 ms
# there is nothing worth routing on.
MIN_PREDICTED_S = 0.1
DEFAULT_OUTPUT_TOKENS = 256  # the expected output when the caller does not say


def predicted_seconds(b: BackendState, output_tokens: int) -> float | None:
    """How long the request should take on `b` from its recent speed; None before any sample."""
    if b.ttft_ema is None and b.tpot_ema is None:
        return None
    return (b.ttft_ema or 0.0) + (b.tpot_ema or 0.0) * output_tokens


def fastest(backends: Iterable[BackendState], output_tokens: int) -> float | None:
    """The shortest predicted time among `backends`; None if none is measured."""
    times = [t for b in backends if (t := predicted_seconds(b, output_tokens)) is not None]
    return min(times) if times else None


def score(
    b: BackendState,
    model: str,
    w: ScoreWeights = DEFAULT_WEIGHTS,
    output_tokens: int = DEFAULT_OUTPUT_TOKENS,
    best_time: float | None = None,
) -> float:
    """`b`'s score for a request of `output_tokens`; `best_time` is the fastest candidate's
    predicted time (`fastest`), None to leave speed out."""
    free = max(0.0, 1.0 - b.load / b.config.max_concurrent)
    total = w.utilisation * free + w.priority * b.config.priority - w.queue * b.waiting
    if model in b.loaded:
        total += w.loaded
    total += w.gpu * GPU_SCORES.get((b.config.gpu or "").upper(), 0.0)
    predicted = predicted_seconds(b, output_tokens)
    if predicted is not None and best_time is not None:
        ratio = max(predicted, MIN_PREDICTED_S) / max(best_time, MIN_PREDICTED_S)
        total -= w.latency * math.log2(ratio)
    return total


@dataclass(frozen=True, slots=True)
class Candidate:
    """A backend that passed the hard constraints, with what its rank was decided on."""

    backend: BackendState
    upstream: str  # the name it serves the model under
    score: float
    predicted_s: float | None  # `predicted_seconds` for the request


def rank_candidates(
    candidates: list[tuple[BackendState, str]],
    now: float = 0.0,
    model: str | None = None,
    weights: ScoreWeights = DEFAULT_WEIGHTS,
    *,
    requires: frozenset[str] = frozenset(),
    output_tokens: int = DEFAULT_OUTPUT_TOKENS,
) -> list[Candidate]:
    """Candidates that pass the hard constraints, each scored once: those with a free slot
    first, each group best score first, then by name."""
    usable = [(b, up) for b, up in candidates if b.usable(now) and requires <= b.features]
    best_time = fastest((b for b, _ in usable), output_tokens)
    scored = [
        Candidate(
            b,
            up,
            score(b, model or "", weights, output_tokens, best_time),
            predicted_seconds(b, output_tokens),
        )
        for b, up in usable
    ]
    return sorted(scored, key=lambda c: (c.backend.full, -c.score, c.backend.name))


def rank_backends(
    candidates: list[tuple[BackendState, str]],
    now: float = 0.0,
    model: str | None = None,
    weights: ScoreWeights = DEFAULT_WEIGHTS,
    *,
    requires: frozenset[str] = frozenset(),
    output_tokens: int = DEFAULT_OUTPUT_TOKENS,
) -> list[tuple[BackendState, str]]:
    """`rank_candidates` as (backend, upstream name) pairs."""
    ranked = rank_candidates(
        candidates, now, model, weights, requires=requires, output_tokens=output_tokens
    )
    return [(c.backend, c.upstream) for c in ranked]
