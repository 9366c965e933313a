"""A discrete-event simulation of the cluster with a simulated clock.

Slots are exclusive: a dispatched request holds one slot of one backend for a fixed start-up
time, its prompt at `prefill_tps`, then streams its output at `decode_tps` in chunks of
`CHUNK_TOKENS`, each chunk reported to the policy as it is produced (that is when `ours` charges
it). Whenever a slot frees or a request arrives, the policy is asked for the next request of
each model that has a free slot, until nothing fits: every policy is work-conserving. A request
still waiting after the gateway's 150 s deadline is withdrawn (Overloaded).

Everything the figures need is recorded on the way: every chunk of service per user, when each
request arrived, started and ended, each slot's busy intervals, when slots freed, and when each
user had requests waiting (backlogged).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import cast

from bench.fairness.policies import Policy
from bench.fairness.workload import Backend, Cluster, Request
from mindrouter.scheduling import TokenCosts

CHUNK_TOKENS = 8
DEADLINE = 150.0
COSTS = TokenCosts()  # service is measured in the same units `ours` charges

# Event kinds, in the order they are handled when they fall on the same instant.
_CHUNK, _TIMEOUT, _ARRIVE = 0, 1, 2


@dataclass(slots=True)
class Outcome:
    req: Request
    started: float | None = None
    ended: float | None = None
    refused: bool = False
    timed_out: bool = False


@dataclass(slots=True)
class Record:
    policy: str
    duration: float
    cluster: Cluster
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    # (t, user, cost, tokens): a prompt when it is prefilled, each output chunk as it streams
    service: list[tuple[float, str, float, int]] = field(default_factory=list)
    busy: list[tuple[str, str, float, float]] = field(default_factory=list)  # backend, req, t0, t1
    frees: dict[str, list[float]] = field(default_factory=dict)  # model -> slot-free times
    backlog: dict[str, list[tuple[float, int]]] = field(default_factory=dict)  # user -> (t, n)


def simulate(policy: Policy, trace: list[Request], cluster: Cluster, duration: float) -> Record:
    rec = Record(policy.name, duration, cluster)
    free = {b.name: b.slots for b in cluster.backends}
    running: dict[str, tuple[float, Backend]] = {}
    waiting: dict[str, int] = {}
    heap: list[tuple[float, int, int, object]] = []
    seq = 0

    def schedule(t: float, kind: int, obj: object) -> None:
        nonlocal seq
        heapq.heappush(heap, (t, kind, seq, obj))
        seq += 1

    def note_waiting(user: str, t: float, delta: int) -> None:
        waiting[user] = waiting.get(user, 0) + delta
        rec.backlog.setdefault(user, []).append((t, waiting[user]))

    def backend_for(model: str) -> Backend | None:
        fits = [b for b in cluster.backends if model in b.models and free[b.name] > 0]
        return max(fits, key=lambda b: (free[b.name], b.name)) if fits else None

    def dispatch(model: str, now: float) -> None:
        while (backend := backend_for(model)) is not None:
            req = policy.pick(model, now)
            if req is None:
                return
            free[backend.name] -= 1
            running[req.id] = (now, backend)
            rec.outcomes[req.id].started = now
            note_waiting(req.user, now, -1)
            ready = now + cluster.ttft + req.prompt_tokens / cluster.prefill_tps
            cost = COSTS.of(req.prompt_tokens, 0)
            rec.service.append((ready, req.user, cost, req.prompt_tokens))
            first = min(CHUNK_TOKENS, req.output_tokens)
            schedule(ready + first / cluster.decode_tps, _CHUNK, (req, req.output_tokens))

    def finish(req: Request, now: float) -> None:
        policy.on_finish(req)
        rec.outcomes[req.id].ended = now
        t0, backend = running.pop(req.id)
        rec.busy.append((backend.name, req.id, t0, now))
        free[backend.name] += 1
        for model in backend.models:
            rec.frees.setdefault(model, []).append(now)
        for model in backend.models:
            dispatch(model, now)

    for req in trace:
        schedule(req.arrival, _ARRIVE, req)
    while heap:
        now, kind, _, obj = heapq.heappop(heap)
        if now > duration:
            break
        if kind == _ARRIVE:
            assert isinstance(obj, Request)
            rec.outcomes[obj.id] = Outcome(obj)
            if not policy.push(obj, now):
                rec.outcomes[obj.id].refused = True
                continue
            note_waiting(obj.user, now, +1)
            schedule(now + DEADLINE, _TIMEOUT, obj)
            dispatch(obj.model, now)
        elif kind == _TIMEOUT:
            assert isinstance(obj, Request)
            out = rec.outcomes[obj.id]
            if out.started is None:
                out.timed_out = True
                policy.remove(obj)
                note_waiting(obj.user, now, -1)
        else:  # a chunk was produced at `now`
            req, left = cast(tuple[Request, int], obj)
            n = min(CHUNK_TOKENS, left)
            if n:
                rec.service.append((now, req.user, COSTS.of(0, n), n))
                policy.on_chunk(req, n)
            left -= n
            if left > 0:
                nxt = min(CHUNK_TOKENS, left)
                schedule(now + nxt / cluster.decode_tps, _CHUNK, (req, left))
            else:
                finish(req, now)
    for req_id, (t0, backend) in running.items():  # still streaming when the run ends
        rec.busy.append((backend.name, req_id, t0, duration))
    return rec
