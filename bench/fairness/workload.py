"""Open-loop request traces from fixed seeds, and the cluster they run on.

Every policy replays exactly the same trace: arrivals are drawn once per scenario, before any
policy runs, from a `random.Random` seeded with the scenario's seed. A user is a Poisson source
(exponential gaps) with its own request sizes; the simulated backends have a fixed number of
slots and a fixed decode speed, as `mindrouter sim --slots N --tokens-per-second R` does.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Request:
    id: str
    user: str
    model: str
    weight: float
    arrival: float
    prompt_tokens: int
    output_tokens: int
    est_output_tokens: int  # what the gateway can know up front: the request's max_tokens


@dataclass(frozen=True, slots=True)
class Backend:
    name: str
    models: tuple[str, ...]
    slots: int


@dataclass(frozen=True, slots=True)
class Cluster:
    backends: tuple[Backend, ...]
    decode_tps: float = 40.0  # output tokens per second per slot
    prefill_tps: float = 800.0  # prompt tokens per second per slot
    ttft: float = 0.05  # fixed start-up cost of every request

    def slots_for(self, model: str) -> int:
        return sum(b.slots for b in self.backends if model in b.models)


ONE_MODEL = Cluster((Backend("gpu-a", ("chat",), 2), Backend("gpu-b", ("chat",), 2)))
TWO_MODELS = Cluster((Backend("gpu-a", ("big",), 2), Backend("gpu-b", ("small",), 2)))


@dataclass(frozen=True, slots=True)
class Source:
    """One user's open-loop arrivals during [start, stop)."""

    user: str
    per_minute: float
    # Uniform ranges of tokens; the default chat request takes ~7.5 s of one slot, so the 2 ×
    # 2-slot cluster serves about 30 of them a minute.
    prompt: tuple[int, int] = (150, 350)
    output: tuple[int, int] = (150, 450)
    weight: float = 1.0
    model: str = "chat"
    start: float = 0.0
    stop: float | None = None  # None = until the end of the run
    pauses: tuple[tuple[float, float], ...] = field(default=())  # (from, to): no arrivals


def make_trace(sources: list[Source], duration: float, seed: int) -> list[Request]:
    rng = random.Random(seed)
    out: list[Request] = []
    for src in sources:
        stop = duration if src.stop is None else min(src.stop, duration)
        t = src.start
        n = 0
        while True:
            t += rng.expovariate(src.per_minute / 60.0)
            if t >= stop:
                break
            if any(a <= t < b for a, b in src.pauses):
                continue
            output = rng.randint(*src.output)
            out.append(
                Request(
                    id=f"{src.user}-{n}",
                    user=src.user,
                    model=src.model,
                    weight=src.weight,
                    arrival=t,
                    prompt_tokens=rng.randint(*src.prompt),
                    output_tokens=output,
                    est_output_tokens=src.output[1],
                )
            )
            n += 1
    out.sort(key=lambda r: (r.arrival, r.id))
    return out
