"""The fairness figures, computed from a simulation record.

Service is measured in the scheduler's own unit (prompt tokens × 1 + output tokens × 2, divided
by nothing: weights enter only through the fair share), counted when the slot produces it.

- weighted share error: for every 60 s window (sliding by 10 s, after the first minute) and every
  user backlogged (a request waiting) throughout it, with at least two such users: service ÷
  (weight ÷ their total weight × their total service) − 1, as an absolute value;
- weighted Jain's index over the same windows and users: (Σx)² ÷ (n·Σx²), x = service ÷ weight;
- light-user excess delay: time from arrival to start, minus the wait for the next free slot of
  the model after arrival (zero if a slot was idle). "Strict" takes the next slot to free, for
  every light request on its own. "Owed" is the best any policy can do when light requests
  overlap: each light request, in arrival order, is owed the next slot to free that is not
  already owed to an earlier one; the light requests' starts are then matched to the owed slots
  in time order (`matched_excess`), so that which light request takes which of the light users'
  slots is left to the scheduler (a fair one serves the less-served light user first);
- share in the first minute after rejoining, in points above the weighted fair share among the
  users active in that minute;
- requests owed per window: for every user, its weighted fair part of a window's service (at the
  run's mean service rate) over the mean cost of one of its requests; the least of these. Below
  ~15, one request is a visible lump of a user's share and the share error shows it whatever the
  scheduler does.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

from bench.fairness.simulator import COSTS, DEADLINE, Record

WINDOW = 60.0
STEP = 10.0


def percentile(values: Iterable[float], q: float) -> float:
    data = sorted(values)
    if not data:
        return float("nan")
    k = max(0, min(len(data) - 1, round(q / 100 * (len(data) - 1))))
    return data[k]


def service(rec: Record, a: float, b: float) -> dict[str, float]:
    out: dict[str, float] = {}
    for t, user, cost, _ in rec.service:
        if a <= t < b:
            out[user] = out.get(user, 0.0) + cost
    return out


def tokens_per_second(rec: Record) -> float:
    return sum(tok for t, _, _, tok in rec.service if t <= rec.duration) / rec.duration


def utilisation(rec: Record, a: float, b: float, model: str | None = None) -> float:
    backends = [x for x in rec.cluster.backends if model is None or model in x.models]
    names = {x.name for x in backends}
    busy = sum(max(0.0, min(t1, b) - max(t0, a)) for name, _, t0, t1 in rec.busy if name in names)
    return busy / (sum(x.slots for x in backends) * (b - a))


def backlogged(rec: Record, user: str, a: float, b: float) -> bool:
    """Whether `user` had a request waiting at every moment of [a, b)."""
    points = rec.backlog.get(user, [])
    k = bisect.bisect_right(points, (a, float("inf")))
    if k == 0 or points[k - 1][1] == 0:
        return False
    for t, count in points[k:]:
        if t >= b:
            break
        if count == 0:
            return False
    return True


def windows(rec: Record) -> list[tuple[float, float]]:
    out = []
    a = WINDOW
    while a + WINDOW <= rec.duration + 1e-9:
        out.append((a, a + WINDOW))
        a += STEP
    return out


def share_errors_and_jain(
    rec: Record, weights: dict[str, float]
) -> tuple[list[float], list[float]]:
    errors: list[float] = []
    jains: list[float] = []
    for a, b in windows(rec):
        users = [u for u in weights if backlogged(rec, u, a, b)]
        if len(users) < 2:
            continue
        got = service(rec, a, b)
        total = sum(got.get(u, 0.0) for u in users)
        total_weight = sum(weights[u] for u in users)
        for u in users:
            fair = weights[u] / total_weight * total
            errors.append(abs(got.get(u, 0.0) / fair - 1.0))
        xs = [got.get(u, 0.0) / weights[u] for u in users]
        jains.append(sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs)))
    return errors, jains


def requests_owed_per_window(rec: Record, weights: dict[str, float]) -> float:
    if rec.duration <= WINDOW:
        return float("nan")
    rate = sum(c for t, _, c, _ in rec.service if t >= WINDOW) / (rec.duration - WINDOW)
    if rate == 0:
        return float("nan")
    costs: dict[str, list[float]] = {}
    for out in rec.outcomes.values():
        req = out.req
        costs.setdefault(req.user, []).append(COSTS.of(req.prompt_tokens, req.output_tokens))
    total_weight = sum(weights.values())
    return min(
        weights[u] / total_weight * rate * WINDOW / (sum(c) / len(c)) for u, c in costs.items()
    )


def matched_excess(starts: list[float], owed: list[float]) -> list[float]:
    """The excess of each start over the owed slot it is matched to, both taken in time order."""
    return [max(0.0, a - o) for a, o in zip(sorted(starts), sorted(owed), strict=True)]


def light_excess_delays(rec: Record, users: set[str]) -> tuple[list[float], list[float]]:
    """Excess delays (s) of `users`' requests: (strict, owed). Unserved ones count the deadline."""
    strict: list[float] = []
    starts: dict[str, list[float]] = {}  # model -> when its light requests started
    owed: dict[str, list[float]] = {}  # model -> the slots owed to them
    taken: dict[str, set[int]] = {}
    light = sorted(
        (o for o in rec.outcomes.values() if o.req.user in users and not o.refused),
        key=lambda o: o.req.arrival,
    )
    for out in light:
        req = out.req
        frees = rec.frees.get(req.model, [])
        idle = _idle_slot_at(rec, req.model, req.arrival, req.id)
        delay = (out.started if out.started is not None else req.arrival + DEADLINE) - req.arrival
        i = bisect.bisect_left(frees, req.arrival)
        next_free = req.arrival if idle else (frees[i] if i < len(frees) else rec.duration)
        strict.append(max(0.0, delay - (next_free - req.arrival)))
        starts.setdefault(req.model, []).append(req.arrival + delay)
        if idle:
            owed.setdefault(req.model, []).append(req.arrival)
            continue
        used = taken.setdefault(req.model, set())
        while i in used:
            i += 1
        used.add(i)
        owed.setdefault(req.model, []).append(frees[i] if i < len(frees) else rec.duration)
    return strict, [e for model in starts for e in matched_excess(starts[model], owed[model])]


def _idle_slot_at(rec: Record, model: str, t: float, own: str) -> bool:
    backends = [x for x in rec.cluster.backends if model in x.models]
    names = {x.name for x in backends}
    busy = sum(1 for n, rid, t0, t1 in rec.busy if n in names and rid != own and t0 <= t < t1)
    return busy < sum(x.slots for x in backends)


def rejoin_points(rec: Record, user: str, weights: dict[str, float], at: float) -> float:
    """Points by which `user`'s share of the minute after `at` exceeds its weighted fair share."""
    got = service(rec, at, at + WINDOW)
    active = [u for u in weights if got.get(u, 0.0) > 0 or u == user]
    fair = weights[user] / sum(weights[u] for u in active)
    share = got.get(user, 0.0) / max(1e-9, sum(got.values()))
    return 100.0 * (share - fair)
