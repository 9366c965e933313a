"""The fairness scenario matrix (simulated clock) and the figures each one yields.

Request sizes: chat requests take ~7.5 s of one slot (150–350 prompt tokens, 150–450 output
tokens at 40 tokens/s), so the 2 × 2-slot cluster serves about 30 requests a minute. Each
scenario has its own seed; all policies replay the same trace.

The share-error figures depend on how many of a user's requests fit in the user's fair share of
a window, whatever the scheduler: a slot is held for a whole request, so a user's service in a
window runs ahead of or behind the fair line by up to about one request. On 2 × 2 slots a
weight-1 user among weights 3, 3, 1, 1 is owed half a slot, four of these requests a minute,
and one request is a quarter of that. So the fairness scenarios run on three testbeds (the main
one and `TESTBEDS`): as above; with requests a quarter as long and four times as many (the size
the real-time mode uses); and on 2 × 8 slots with four times the arrivals. `granularity` sweeps the
request size on 2 × 2 to show the dependence, with the clairvoyant reference beside ours.
"""

from __future__ import annotations

import dataclasses
import itertools
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.fairness import metrics as m
from bench.fairness.policies import (
    Clairvoyant,
    Fcfs,
    Ours,
    Policy,
    RateLimited,
    RoundRobin,
)
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


def _scaled(tokens: tuple[int, int], k: float) -> tuple[int, int]:
    return max(1, round(tokens[0] * k)), max(1, round(tokens[1] * k))


def resize(sc: Scenario, k: float) -> Scenario:
    """The same scenario on the same cluster with every request `k` times as large (prompt and
    output) and arrivals 1/k times as frequent, so the offered load is unchanged."""
    sources = [
        dataclasses.replace(
            s,
            per_minute=s.per_minute / k,
            prompt=_scaled(s.prompt, k),
            output=_scaled(s.output, k),
        )
        for s in sc.sources
    ]
    return dataclasses.replace(sc, sources=sources)


@dataclass(frozen=True, slots=True)
class Testbed:
    key: str  # in the results
    title: str
    change: str  # what differs from the main matrix, appended to each scenario's description
    make: Callable[[Scenario], Scenario]


TESTBEDS = (
    Testbed("short", "2 backends × 2 slots, requests a quarter as long", "(¼ size, ×4 rates)",
            lambda sc: resize(sc, 0.25)),
    Testbed("wide", "2 backends × 8 slots", "(×4 rates)", widen),
)  # fmt: skip
GRANULARITY = (0.125, 0.25, 0.5, 1.0, 2.0)  # request-size factors swept on the weights scenario


POLICIES: list[Callable[[], Policy]] = [
    Ours,
    Clairvoyant,
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
        out["requests_owed"] = m.requests_owed_per_window(rec, sc.weights)
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


def run(
    sc: Scenario, seeds: int, policies: list[Callable[[], Policy]] = POLICIES
) -> dict[str, dict[str, Any]]:
    """Every policy's figures on `seeds` traces of the scenario (its seed, then seed + 1000,
    ...): the median of each figure over the traces, as repeated runs call for,
    and under `per_seed` each trace's own figures."""
    runs: dict[str, list[dict[str, Any]]] = {}
    for i in range(seeds):
        trace = make_trace(sc.sources, sc.duration, sc.seed + 1000 * i)
        for make in policies:
            policy = make()
            rec = simulate(policy, trace, sc.cluster, sc.duration)
            runs.setdefault(policy.name, []).append(figures(sc, rec))
    results: dict[str, dict[str, Any]] = {}
    for name, figs in runs.items():
        keys = {k for f in figs for k in f}
        out: dict[str, Any] = {
            k: statistics.median(f[k] for f in figs if k in f) for k in sorted(keys)
        }
        out["per_seed"] = figs
        results[name] = out
    return results


def granularity(sc: Scenario, seeds: int) -> list[dict[str, Any]]:
    """The share error of ours and of the clairvoyant reference as the requests grow (`resize`)."""
    rows: list[dict[str, Any]] = []
    for k in GRANULARITY:
        sized = resize(sc, k)
        res = run(sized, seeds, [Ours, Clairvoyant])
        row: dict[str, Any] = {"size": k, "requests_owed": res["ours"]["requests_owed"]}
        for name, figs in res.items():
            for key in ("share_error_p95", "share_error_max", "jain_min"):
                row[f"{name} {key}"] = figs.get(key)
        rows.append(row)
    return rows
