"""The soak's ledger, read at the end from the database, Redis, the simulated engines and the
clients' own log."""

from __future__ import annotations

import asyncio
import time
from bisect import bisect_left
from collections import Counter, defaultdict
from datetime import datetime
from typing import Any

import redis
from sqlalchemy import select

from bench.chaos.faults import Schedule
from bench.chaos.load import Sent
from bench.chaos.stack import USERS, Stack
from bench.harness import stores_at
from mindrouter.stores.sql.schema import audit_records, usage, users

# A record's created_at trails its admission by the few milliseconds it takes to build the
# record, so two admissions exactly a minute apart can have records a hair less than a minute
# apart: the window the ledger counts in is 59.5 s.
WINDOW_S = 59.5


async def _read(url: str) -> tuple[list[Any], dict[str, Any]]:
    async with stores_at(url) as stores, stores.engine.connect() as conn:
        records = (await conn.execute(select(audit_records))).all()
        rows = (
            await conn.execute(
                select(users.c.name, usage.c.period_tokens, usage.c.lifetime_tokens).join(
                    usage, usage.c.user_id == users.c.id
                )
            )
        ).all()
    return list(records), {r.name: r for r in rows}


def _ts(value: datetime) -> float:
    return value.timestamp()


def _max_in_window(times: list[float]) -> int:
    times = sorted(times)
    best = 0
    for i, t in enumerate(times):
        best = max(best, i - bisect_left(times, t - WINDOW_S + 1e-6) + 1)
    return best


def _max_overlap(spans: list[tuple[float, float]]) -> tuple[int, float]:
    """The most spans open at once, and the first moment that many were."""
    events = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    now = best = 0
    at = 0.0
    for t, step in events:
        now += step
        if now > best:
            best, at = now, t
    return best, at


def pending_count(url: str) -> int:
    records, _ = asyncio.run(_read(url))
    return sum(1 for r in records if r.status == "pending")


def ledger(stack: Stack, schedule: Schedule, log: list[Sent], started: float) -> dict[str, Any]:
    records, usage_rows = asyncio.run(_read(stack.database_url))
    by_request: dict[str, list[Any]] = defaultdict(list)
    for r in records:
        by_request[r.request_id].append(r)
    accepted = [s for s in log if s.status == 200]
    missing = [s for s in accepted if not by_request.get(s.request_id or "")]
    duplicated = [s for s in accepted if len(by_request.get(s.request_id or "", [])) > 1]
    not_final = [
        s
        for s in accepted
        if any(r.status == "pending" for r in by_request.get(s.request_id or "", []))
    ]

    # Tokens: each user's durable usage against the sum of their records, and what the engines
    # generated against the output the records account for.
    names = {r.user_id: r.user_name for r in records}
    charged_by_records: Counter[str] = Counter()
    for r in records:
        charged_by_records[names.get(r.user_id, "?")] += (r.input_tokens or 0) + (
            r.output_tokens or 0
        )
    usage_diff = {
        u: int(usage_rows[u].lifetime_tokens if u in usage_rows else 0) - charged_by_records[u]
        for u in USERS
    }
    generated = sum(
        rec.completion_tokens for state in stack.states.values() for rec in state.records
    )
    output = sum(r.output_tokens or 0 for r in records)
    after_kill = _generated_after_a_kill(stack, schedule.kills)
    interrupted = [r for r in records if r.status == "interrupted"]
    # A stream cut by a kill: each piece of text that reached its client was relayed by the
    # replica, so it must be charged. What the engine had sent beyond it can be in a socket at
    # the kill, read by nobody: the engine's count alone knows it.
    sent_by_id = {s.request_id: s for s in log if s.request_id}
    delivered_not_charged = sum(
        max(0, sent_by_id[r.request_id].chunks - (r.output_tokens or 0))
        for r in interrupted
        if r.request_id in sent_by_id
    )

    # Limits, from the records: admissions per sliding minute, requests in flight at once (a
    # record of a killed replica ends at the kill), budget.
    kills = sorted(schedule.kills)
    excess: dict[str, dict[str, Any]] = {}
    for u, (rpm, conc, budget) in USERS.items():
        mine = [r for r in records if r.user_name == u]
        spans: list[tuple[float, float]] = []
        for r in mine:
            start = _ts(r.created_at)
            end = _ts(r.completed_at) if r.completed_at else time.time()
            if r.status == "interrupted":
                after = [k for k, inst in kills if inst == r.instance_id and k >= start]
                end = after[0] if after else end
            spans.append((start, end))
        used = int(usage_rows[u].period_tokens) if u in usage_rows else 0
        most, peak = _max_overlap(spans)
        excess[u] = {
            "rpm_max": _max_in_window([s for s, _ in spans]),
            "rpm_limit": rpm,
            "concurrency_max": most,
            "concurrency_limit": conc,
            # The records open at the peak, when it is over the limit: what a finding needs.
            "concurrency_peak": [
                {
                    "request_id": r.request_id,
                    "instance": r.instance_id,
                    "status": r.status,
                    "from": round(a - started, 3),
                    "to": round(b - started, 3),
                }
                for r, (a, b) in zip(mine, spans, strict=True)
                if a <= peak < b
            ]
            if most > conc
            else [],
            "budget_used": used,
            "budget": budget,
        }

    # What Redis still holds once the replicas have stopped.
    assert stack.redis is not None
    client = redis.Redis.from_url(stack.redis.url)
    now = time.time()
    leaked_leases = 0
    reserved = 0
    for key in client.scan_iter(match=f"{stack.prefix}limits:leases:*"):
        leaked_leases += int(client.zcount(key, f"({now}", "+inf"))
    for key in client.scan_iter(match=f"{stack.prefix}limits:usage:*"):
        reserved += int(client.hget(key, "reserved") or 0)
    client.close()
    # Backend slots the engines still count as taken.
    engine_active = sum(len(state.active) for state in stack.states.values())

    # 5xx and broken answers: explained by a kill (the request ran on the replica killed) or a
    # Redis outage (fail_closed refuses while the counters cannot be reached), or not.
    def near_kill(s: Sent) -> bool:
        rec = by_request.get(s.request_id or "", [])
        if any(r.status == "interrupted" for r in rec):
            return True
        return any(k - 1 <= s.end <= k + 3 for k, _ in kills) or any(
            s.start <= k <= s.end for k, _ in kills
        )

    def in_redis_outage(s: Sent) -> bool:
        # fail_closed: refused with "rate limiting is unavailable" while Redis cannot answer
        # (each process tries it again a second after a failure).
        said = "rate limiting" in s.body and "unavailable" in s.body
        return said and any(a - 1 <= s.end <= b for a, b in schedule.redis_outages)

    failures = [
        s
        for s in log
        if (s.status or 0) >= 500
        or s.transport_error
        or (s.status == 200 and s.stream and not s.complete)
    ]
    on_killed = [s for s in failures if near_kill(s)]
    redis_refused = [s for s in failures if s not in on_killed and in_redis_outage(s)]
    other = [s for s in failures if s not in on_killed and s not in redis_refused]

    return {
        "requests": len(log),
        "statuses": dict(Counter(str(s.status) for s in log)),
        "accepted": len(accepted),
        "records": len(records),
        "record_statuses": dict(Counter(r.status for r in records)),
        "accepted_without_record": len(missing),
        "accepted_with_duplicate_records": len(duplicated),
        "accepted_not_final": len(not_final),
        "pending_records": sum(1 for r in records if r.status == "pending"),
        "usage_minus_records_by_user": usage_diff,
        "generated_output_tokens": generated,
        "recorded_output_tokens": output,
        "generated_after_a_kill": after_kill,
        "interrupted_records": len(interrupted),
        "interrupted_output_tokens": sum(r.output_tokens or 0 for r in interrupted),
        "delivered_not_charged": delivered_not_charged,
        "limits": excess,
        "leases_held_after": leaked_leases,
        "reserved_after": reserved,
        "engine_requests_active_after": engine_active,
        "failures_on_killed_replica": len(on_killed),
        "failures_in_redis_outage": len(redis_refused),
        "failures_unexplained": len(other),
        "unexplained_examples": [
            {
                "status": s.status,
                "dialect": s.dialect,
                "stream": s.stream,
                "error": s.transport_error or s.inband_error or s.body[:160],
                "at": round(s.end - started, 1),
            }
            for s in other[:10]
        ],
    }


# A stream cut by a kill is noticed by its engine a moment later (the hang-up reaches it), and
# generation stops then; only the engine knows of the tokens it generated in between.
NOTICED_WITHIN_S = 5.0


def _generated_after_a_kill(stack: Stack, kills: list[tuple[float, str]]) -> int:
    """Tokens the engines generated, for streams they saw hang up just after a kill, after the
    moment of the kill: no process was left to read them, so none could be charged. The rest of
    "generated − recorded output" had reached the killed replica's socket or HTTP client unread.
    """
    to_wall = time.time() - time.monotonic()
    found = 0
    for state in stack.states.values():
        for rec in state.records:
            if rec.cancelled_at is None:
                continue
            gone = rec.cancelled_at + to_wall
            kill = next((k for k, _ in kills if k <= gone <= k + NOTICED_WITHIN_S), None)
            if kill is not None:
                found += sum(1 for t in rec.last_tokens_at if t + to_wall >= kill)
    return found
