"""`python -m bench.chaos`: the chaos soak. Three `mindrouter serve` replicas behind a
round-robin proxy, their own PostgreSQL database and Redis, simulated vLLM, Ollama and llama.cpp
engines, clients in three dialects (streamed and not) for users at their limits, and faults on
a schedule (faults.py); the ledger (ledger.py) is checked at the end.

    .venv/bin/python -m bench.chaos --seconds 600 --seed 1 --out bench/results/chaos-1.json
    .venv/bin/python -m bench.chaos --seconds 90 --cycle 60     # the short form .ci/run runs
    .venv/bin/python -m bench.chaos.report bench/results/chaos-*.json > bench/results/chaos.md

Exits 1 when the ledger finds a violation (listed on stderr).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.chaos.faults import Schedule
from bench.chaos.ledger import ledger, pending_count
from bench.chaos.load import Load
from bench.chaos.stack import GRACE_S, USERS, Stack
from bench.harness import stores_at

BUDGET_SLACK = 20  # tokens: the input estimate's error on the last admitted requests


async def _keys(url: str) -> dict[str, str]:
    async with stores_at(url) as stores:
        return {u: (await stores.keys.create_key(u)).key for u in USERS}


def violations(result: dict[str, Any]) -> list[str]:
    found = []
    for key in (
        "accepted_without_record",
        "accepted_with_duplicate_records",
        "accepted_not_final",
        "delivered_not_charged",
        "pending_records",
        "leases_held_after",
        "reserved_after",
        "engine_requests_active_after",
        "failures_unexplained",
    ):
        if result[key]:
            found.append(f"{key}: {result[key]}")
    for user, diff in result["usage_minus_records_by_user"].items():
        if diff:
            found.append(f"usage of {user} differs from its records by {diff} tokens")
    lost = result["generated_output_tokens"] - result["recorded_output_tokens"]
    if lost < 0:
        found.append(f"{-lost} output tokens recorded that no engine generated")
    for user, lim in result["limits"].items():
        if lim["rpm_max"] > lim["rpm_limit"]:
            found.append(f"{user}: {lim['rpm_max']} admissions in a minute > {lim['rpm_limit']}")
        if lim["concurrency_max"] > lim["concurrency_limit"]:
            found.append(f"{user}: {lim['concurrency_max']} in flight > {lim['concurrency_limit']}")
        # Admission keeps used + reserved + this request's estimate within the budget; the
        # charge is the engine's count, which may exceed the gateway's input estimate by a few
        # tokens. More than that is a violation.
        if lim["budget"] and lim["budget_used"] > lim["budget"] + BUDGET_SLACK:
            found.append(f"{user}: used {lim['budget_used']} of a budget of {lim['budget']}")
    for fault in result["faults"]:
        if fault["kind"] == "SIGTERM replica" and fault["detail"].get("exit") != 0:
            found.append(f"SIGTERM exit status {fault['detail'].get('exit')}")
        if fault["kind"] == "SIGKILL replica" and (
            fault["recovered_s"] is None or fault["recovered_s"] > 30
        ):
            found.append(f"records of a killed replica closed after {fault['recovered_s']} s")
        if fault["kind"] == "SIGKILL replica" and (
            fault["extra_s"] is None or fault["extra_s"] > 30
        ):
            found.append(f"slots of a killed replica free after {fault['extra_s']} s")
    return found


async def _soak(stack: Stack, seconds: float, cycle: float, seed: int) -> tuple[Load, Schedule]:
    keys = await _keys(stack.database_url)
    load = Load(stack.url, keys, seed)
    schedule = Schedule(stack, cycle)

    async def first_decided_after(t: float) -> float | None:
        """When the first request sent after `t` was decided by the limits again (admitted and
        answered, or refused for a limit), not refused for want of Redis or the database."""
        for _ in range(600):  # bounded: 2 minutes
            ends = [s.end for s in load.log if s.status in (200, 429) and s.start >= t and s.end]
            if ends:
                return min(ends)
            await asyncio.sleep(0.2)
        return None

    await asyncio.gather(load.run(seconds), schedule.run(seconds, first_decided_after))
    return load, schedule


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.chaos")
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--cycle", type=float, default=120, help="seconds per fault cycle")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, help="write the ledger as JSON here")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="mindrouter-chaos-"))
    stack = Stack(workdir)
    # A soak stopped with SIGTERM (a CI timeout, `kill`) still takes down the Redis server,
    # the replicas and the backends it started: the exit runs the `finally` below.
    signal.signal(signal.SIGTERM, _exit_on_signal)
    started = time.time()
    try:
        stack.up()
        load, schedule = asyncio.run(_soak(stack, args.seconds, args.cycle, args.seed))
        for _ in range(240):  # bounded: every record closed (sweeps included)
            if pending_count(stack.database_url) == 0:
                break
            time.sleep(0.25)
        exits = []
        for replica in stack.replicas:
            if replica.proc is not None:
                replica.signal(signal.SIGTERM)
                exits.append(replica.wait(GRACE_S + 30))
        result = ledger(stack, schedule, load.log, started)
        result.update(
            seed=args.seed,
            seconds=round(time.time() - started),
            load_seconds=args.seconds,
            final_exits=exits,
            failed_starts=sum(r.failed_starts for r in stack.replicas),
            faults=[
                {
                    "kind": f.kind,
                    "at": round(f.at - started, 1),
                    "target": f.target,
                    "detail": f.detail,
                    "recovered_s": None if f.recovered_s is None else round(f.recovered_s, 2),
                    "extra_s": None if f.extra_s is None else round(f.extra_s, 2),
                }
                for f in sorted(schedule.faults, key=lambda f: f.at)
            ],
        )
    finally:
        stack.down()
    found = violations(result)
    result["violations"] = found
    text = json.dumps(result, indent=2, default=str)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    for line in found:
        print("VIOLATION:", line, file=sys.stderr)
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
