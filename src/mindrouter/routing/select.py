"""Pick a backend for a request: hard constraints first, then a soft score.

Hard: healthy, not draining, breaker allowing, serving the model. Soft (higher is better): the
model already loaded on the backend dominates (a cold load costs tens of seconds), then free
capacity, admin priority, faster GPU class and lower recent latency as tie-breakers.
"""

from __future__ import annotations

from dataclasses import dataclass

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
    loaded: float = 100.0
    utilisation: float = 20.0  # times the free fraction of the backend's slots
    priority: float = 5.0  # per admin priority point
    gpu: float = 1.0  # times the GPU class score
    latency: float = 10.0  # times 1 / (1 + ttft seconds)
    queue: float = 2.0  # per request waiting in the engine's own queue


def score(b: BackendState, model: str, w: ScoreWeights = ScoreWeights()) -> float:
    free = max(0.0, 1.0 - b.load / b.max_concurrent)
    total = w.utilisation * free + w.priority * b.priority - w.queue * b.waiting
    if model in b.loaded:
        total += w.loaded
    total += w.gpu * GPU_SCORES.get((b.gpu or "").upper(), 0.0)
    if b.ttft_ema is not None:
        total += w.latency / (1.0 + b.ttft_ema)
    return total


def rank_backends(
    candidates: list[tuple[BackendState, str]],
    now: float = 0.0,
    model: str | None = None,
    weights: ScoreWeights = ScoreWeights(),
) -> list[tuple[BackendState, str]]:
    """Usable candidates: those with a free slot first, each group best score first."""
    usable = [(b, up) for b, up in candidates if b.usable(now)]

    def key(item: tuple[BackendState, str]) -> tuple[bool, float, str]:
        b = item[0]
        return (b.full, -score(b, model or "", weights), b.name)

    return sorted(usable, key=key)
