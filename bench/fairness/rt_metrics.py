"""The fairness figures from what the real-time clients saw, one record per request.

Same definitions as the simulated-clock mode (`metrics.py`), measured from the client side:

- service, in the scheduler's unit: the prompt's tokens (from the stream's final usage) when the
  first token arrives, then 2 per output token as each streamed chunk arrives;
- a user is backlogged while one of its requests has been sent and has not yet produced its
  first token (gaps shorter than `GAP` are closed: a closed-loop client needs a few ms to send the
  next request);
- weighted share error per window and user backlogged throughout it (with at least two such
  users): |service ÷ (weight ÷ Σ weights × Σ service) − 1|; weighted Jain's index over the same;
- a slot is busy from a request's first token to its last; the light-user excess delay is the
  time from sending to the first token minus the wait for the next slot to free after sending (0
  when one was idle), counted on the slots the request could have: those of every gateway when
  they share the backends' slots (the slot board), else its own gateway's part.

Windows are 20 s by default, shorter than the simulated-clock mode's 60 s, because the default
runs last one minute: see `realtime.py` (`--duration`, `--window`).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from bench.fairness.metrics import matched_excess, percentile

GAP = 0.1


@dataclass(slots=True)
class Shot:
    """One request as its client saw it; times in seconds from the start of the run."""

    user: str
    gateway: int
    sent: float
    max_tokens: int
    tag: str = ""  # marks the request's prompt, to find the engine's record of it
    first: float | None = None
    end: float | None = None
    chunks: list[float] = field(default_factory=list)
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    status: str = "pending"


def service_events(shots: list[Shot]) -> list[tuple[float, str, float]]:
    """(time, user, cost) for every prompt and every output token that arrived."""
    prompts: dict[str, list[int]] = {}
    for s in shots:
        if s.prompt_tokens is not None:
            prompts.setdefault(s.user, []).append(s.prompt_tokens)
    typical = {u: sum(v) / len(v) for u, v in prompts.items()}
    out: list[tuple[float, str, float]] = []
    for s in shots:
        if s.first is None:
            continue
        # A stream cut at the end of the run has no usage: its prompt is the user's typical one.
        prompt = s.prompt_tokens if s.prompt_tokens is not None else typical.get(s.user, 0.0)
        out.append((s.first, s.user, float(prompt)))
        out.extend((t, s.user, 2.0) for t in s.chunks)
    out.sort()
    return out


def service(events: list[tuple[float, str, float]], a: float, b: float) -> dict[str, float]:
    got: dict[str, float] = {}
    for t, user, cost in events:
        if a <= t < b:
            got[user] = got.get(user, 0.0) + cost
    return got


def windows(
    duration: float, warmup: float, window: float, step: float
) -> list[tuple[float, float]]:
    out = []
    a = warmup
    while a + window <= duration + 1e-9:
        out.append((a, a + window))
        a += step
    return out


def waiting_spans(shots: list[Shot], user: str, horizon: float) -> list[tuple[float, float]]:
    """The user's merged spans of having a request waiting for its first token."""
    spans = sorted(
        (s.sent, s.first if s.first is not None else horizon) for s in shots if s.user == user
    )
    merged: list[tuple[float, float]] = []
    for a, b in spans:
        if merged and a <= merged[-1][1] + GAP:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def backlogged(spans: list[tuple[float, float]], a: float, b: float) -> bool:
    return any(x <= a and y >= b for x, y in spans)


def share_errors_and_jain(
    shots: list[Shot],
    weights: dict[str, float],
    wins: list[tuple[float, float]],
    horizon: float,
) -> tuple[list[float], list[float], list[tuple[float, float]]]:
    """Every backlogged user's share error in every window, every window's Jain index, and
    each window's start with its worst error (windows with fewer than two backlogged users are
    skipped)."""
    events = service_events(shots)
    spans = {u: waiting_spans(shots, u, horizon) for u in weights}
    errors: list[float] = []
    jains: list[float] = []
    worst: list[tuple[float, float]] = []
    for a, b in wins:
        users = [u for u in weights if backlogged(spans[u], a, b)]
        if len(users) < 2:
            continue
        got = service(events, a, b)
        total = sum(got.get(u, 0.0) for u in users)
        total_weight = sum(weights[u] for u in users)
        these = [abs(got.get(u, 0.0) / (weights[u] / total_weight * total) - 1.0) for u in users]
        errors += these
        worst.append((a, max(these)))
        xs = [got.get(u, 0.0) / weights[u] for u in users]
        jains.append(sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs)))
    return errors, jains, worst


def shares(shots: list[Shot], a: float, b: float) -> dict[str, float]:
    got = service(service_events(shots), a, b)
    total = sum(got.values()) or 1.0
    return {u: v / total for u, v in sorted(got.items())}


def tokens_per_second(shots: list[Shot], a: float, b: float) -> float:
    return sum(1 for s in shots for t in s.chunks if a <= t < b) / (b - a)


def utilisation(shots: list[Shot], a: float, b: float, slots: int, horizon: float) -> float:
    busy = 0.0
    for s in shots:
        if s.first is None:
            continue
        end = s.end if s.end is not None else horizon
        busy += max(0.0, min(end, b) - max(s.first, a))
    return busy / (slots * (b - a))


@dataclass(frozen=True, slots=True)
class EngineRun:
    """A request as an engine served it: when it held a slot, on the run's clock."""

    tag: str
    engine: str
    started: float
    finished: float | None  # None: still running when the run ended
    queued: float | None = None  # seconds its gateway queued it, from the audit trail


# (pool, id, sent, start): a light request; (pool, id, from, to): a slot held
_Light = tuple[int, str, float, float]
_Held = tuple[int, str, float, float]


def _excess(
    light: list[_Light], held: list[_Held], slots: int
) -> tuple[list[float], list[float], list[float]]:
    """(delays, strict excess, owed excess) of the light requests, in seconds, against the slots
    of their pool (see `light_delays`)."""
    busy: dict[int, list[tuple[str, float, float]]] = {}
    frees: dict[int, list[float]] = {}
    for pool, ident, a, b in held:
        busy.setdefault(pool, []).append((ident, a, b))
        frees.setdefault(pool, []).append(b)
    for times in frees.values():
        times.sort()
    delays: list[float] = []
    strict: list[float] = []
    starts: dict[int, list[float]] = {}  # pool -> when its light requests started
    owed: dict[int, list[float]] = {}  # pool -> the slots owed to them
    taken: dict[int, set[int]] = {}
    for pool, ident, sent, start in sorted(light, key=lambda r: r[2]):
        delay = start - sent
        delays.append(delay)
        starts.setdefault(pool, []).append(start)
        # A slot was idle if fewer requests than slots held one when this one was sent.
        holding = sum(1 for other, a, b in busy.get(pool, []) if other != ident and a <= sent < b)
        if holding < slots:
            strict.append(max(0.0, delay))
            owed.setdefault(pool, []).append(sent)
            continue
        times = frees.get(pool, [])
        i = bisect.bisect_left(times, sent)
        next_free = times[i] if i < len(times) else math.inf
        strict.append(max(0.0, start - next_free))
        used = taken.setdefault(pool, set())
        while i in used:
            i += 1
        used.add(i)
        owed.setdefault(pool, []).append(times[i] if i < len(times) else math.inf)
    excess = [e for pool in starts for e in matched_excess(starts[pool], owed[pool])]
    return delays, strict, excess


def light_delays(
    shots: list[Shot], light: set[str], slots_per_pool: int, horizon: float, pooled: bool = False
) -> tuple[list[float], list[float], list[float]]:
    """(delays, strict excess, owed excess) in seconds of the light users' requests, as the
    clients saw them, as in the simulated-clock mode (`metrics.light_excess_delays`): "strict"
    takes the next slot to free after sending; "owed" skips slots already owed to an earlier
    light request still waiting and matches the light requests' first tokens to the owed slots
    in time order. A slot is held from a request's first token to its last; an unserved request
    counts up to the end of the run. Slots are counted per gateway (each owns its part of every
    backend), or with `pooled` as one pool of `slots_per_pool` that every gateway shares.

    Seen from the client, a slot looks free between one request's last token and the next
    one's first, although the gateway handed it on at once: a light request sent in that gap is
    taken to have found a slot idle. `engine_light_excess` uses the engines' own records."""

    def pool(s: Shot) -> int:
        return 0 if pooled else s.gateway

    held = [
        (pool(s), str(i), s.first, s.end if s.end is not None else horizon)
        for i, s in enumerate(shots)
        if s.first is not None
    ]
    requests = [
        (pool(s), str(i), s.sent, s.first if s.first is not None else horizon)
        for i, s in enumerate(shots)
        if s.user in light
    ]
    return _excess(requests, held, slots_per_pool)


def engine_light_excess(
    shots: list[Shot],
    engine: list[EngineRun],
    light: set[str],
    slots: int,
    horizon: float,
    from_queue: bool = False,
) -> tuple[list[float], list[float]]:
    """(strict excess, owed excess) in seconds of the light users' requests, as in
    `light_delays` but with the slots as the engines held them (`EngineRun`, every engine one
    pool) and each light request starting when an engine began it: the time its gateway took
    beyond the slot it was owed. A light request no engine began counts up to the end.

    `from_queue`: each light request counts from when it entered its gateway's queue (the engine
    start less the gateway's queued time) rather than from when the client sent it, so the
    network and the gateway's admission (a few milliseconds, during which a slot may be handed
    to someone already waiting) are left out: the queueing delay alone."""
    held = [
        (0, r.tag, r.started, r.finished if r.finished is not None else horizon) for r in engine
    ]
    runs = {r.tag: r for r in engine}
    requests = []
    for s in shots:
        if s.user not in light:
            continue
        r = runs.get(s.tag)
        start = r.started if r is not None else horizon
        entered = s.sent
        if from_queue and r is not None and r.queued is not None:
            entered = max(s.sent, r.started - r.queued)
        requests.append((0, s.tag, entered, start))
    _, strict, owed = _excess(requests, held, slots)
    return strict, owed


def summary(values: Iterable[float], scale: float = 1.0) -> dict[str, float]:
    data = [v * scale for v in values]
    if not data:
        return {"n": 0}
    return {
        "n": len(data),
        "p50": percentile(data, 50),
        "p95": percentile(data, 95),
        "p99": percentile(data, 99),
        "max": max(data),
        "min": min(data),
        "mean": sum(data) / len(data),
    }
