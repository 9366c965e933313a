"""The scenario matrix of BENCHMARKS.md §2 (simulated clock) and the figures each one yields.

Request sizes: chat requests take ~7.5 s of one slot (150–350 prompt tokens, 150–450 output
tokens at 40 tokens/s), so the 2 × 2-slot cluster serves about 30 requests a minute. Each
scenario has its own seed; all policies replay the same trace.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.fairness import metrics as m
from bench.fairness.policies import Fcfs, Ours, Policy, RateLimited, RoundRobin
from bench.fairness.simulator import Record, simulate
from bench.fairness.workload import (
    ONE_MODEL,
    TWO_MODELS,
    Backend,
    Cluster,
    Source,
    make_trace,
)

RATE_LIMIT_PER_MINUTE = 10  # a third of the cluster per user: a typical static setting
LIGHT = ("light-1", "light-2", "light-3", "light-4")
FAIRNESS_SCENARIOS = ("weights", "rejoin", "prompt vs output")  # also run on 2 × 8 slots


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    what: str
    sources: list[Source]
    duration: float
    seed: int
    cluster: Cluster = ONE_MODEL
    rejoin_at: float | None = None

    @property
    def weights(self) -> dict[str, float]:
        return {s.user: s.weight for s in self.sources}


def scenarios(short: bool) -> list[Scenario]:
    k = 0.5 if short else 1.0
    away = (120.0 * k, 480.0 * k)  # the rejoining user sends nothing in between
    return [
        Scenario(
            "flood",
            "one user at 50 req/min, four at 1 req/min",
            [Source("heavy", 50)] + [Source(u, 1) for u in LIGHT],
            1200 * k,
            11,
        ),
        Scenario(
            "weights",
            "two users of weight 3, two of weight 1, all at 20 req/min",
            [Source(f"w3-{i}", 20, weight=3) for i in (1, 2)]
            + [Source(f"w1-{i}", 20, weight=1) for i in (1, 2)],
            900 * k,
            12,
        ),
        Scenario(
            "rejoin",
            f"four users at 20 req/min; one idle from {away[0]:g} s, back at {away[1]:g} s",
            [Source(f"stay-{i}", 20) for i in (1, 2, 3)] + [Source("rejoin", 20, pauses=(away,))],
            away[1] + 240 * k,
            13,
            rejoin_at=away[1],
        ),
        Scenario(
            "prompt vs output",
            "two prompt-heavy users (2–4k in, ≤40 out), two output-heavy (≤150 in, 300–500 out)",
            [Source(f"prompt-{i}", 30, (2000, 4000), (10, 40)) for i in (1, 2)]
            + [Source(f"output-{i}", 20, (50, 150), (300, 500)) for i in (1, 2)],
            900 * k,
            14,
        ),
        Scenario("lone", "one user at 60 req/min", [Source("solo", 60)], 600 * k, 15),
        Scenario(
            "two models",
            "one user floods model big; one user at 8 req/min on model small (own backend)",
            [Source("heavy", 50, model="big"), Source("small", 8, model="small")],
            600 * k,
            16,
            cluster=TWO_MODELS,
        ),
    ]


WIDE = Cluster((Backend("gpu-a", ("chat",), 8), Backend("gpu-b", ("chat",), 8)))


def widen(sc: Scenario) -> Scenario:
    """The same scenario on 2 × 8 slots with every user sending four times as much."""
    sources = [dataclasses.replace(s, per_minute=4 * s.per_minute) for s in sc.sources]
    return dataclasses.replace(sc, sources=sources, cluster=WIDE)


POLICIES: list[Callable[[], Policy]] = [
    Ours,
    Fcfs,
    RoundRobin,
    lambda: RateLimited(RATE_LIMIT_PER_MINUTE),
]


def figures(sc: Scenario, rec: Record) -> dict[str, Any]:
    out: dict[str, Any] = {
        "tokens_per_s": m.tokens_per_second(rec),
        "slot_busy": m.utilisation(rec, 60.0, sc.duration),
    }
    outcomes = rec.outcomes.values()
    out["requests"] = len(rec.outcomes)
    out["served"] = sum(1 for o in outcomes if o.started is not None)
    out["refused"] = sum(1 for o in outcomes if o.refused)
    out["timed_out"] = sum(1 for o in outcomes if o.timed_out)
    errors, jains = m.share_errors_and_jain(rec, sc.weights)
    if errors:
        out["share_error_p95"] = m.percentile(errors, 95)
        out["share_error_max"] = max(errors)
        out["jain_min"] = min(jains)
        out["jain_mean"] = sum(jains) / len(jains)
        out["windows"] = len(jains)
    if sc.name == "flood":
        strict, owed = m.light_excess_delays(rec, set(LIGHT))
        out["light_excess_p99_ms_strict"] = 1000 * m.percentile(strict, 99)
        out["light_excess_p99_ms_owed"] = 1000 * m.percentile(owed, 99)
        out["light_requests"] = len(strict)
    if sc.name == "two models":
        _, owed = m.light_excess_delays(rec, {"small"})
        out["small_excess_p99_ms"] = 1000 * m.percentile(owed, 99)
        out["small_utilisation"] = m.utilisation(rec, 60.0, sc.duration, "small")
        out["big_utilisation"] = m.utilisation(rec, 60.0, sc.duration, "big")
    if sc.name == "lone":
        # From the moment a request first has to wait: before that the user had not yet sent
        # enough to fill the slots, which no scheduler can help.
        points = rec.backlog["solo"]
        first = next(t for (t, n), (t2, _) in itertools.pairwise(points) if n and t2 > t)
        out["utilisation"] = m.utilisation(rec, first, sc.duration)
    if sc.rejoin_at is not None:
        out["rejoin_points"] = m.rejoin_points(rec, "rejoin", sc.weights, sc.rejoin_at)
    return out


def run(sc: Scenario) -> dict[str, dict[str, Any]]:
    trace = make_trace(sc.sources, sc.duration, sc.seed)
    results: dict[str, dict[str, Any]] = {}
    for make in POLICIES:
        policy = make()
        results[policy.name] = figures(sc, simulate(policy, trace, sc.cluster, sc.duration))
    return results
