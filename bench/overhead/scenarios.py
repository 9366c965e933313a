"""The scenarios of the overhead run that check one target each: the mock's parity of a unary
answer and a unary-style stream, the streaming capacity of one core, the `--workers` rows and
the single-row commit of the benchmark's PostgreSQL.

Each takes the running `Bench` (bench/overhead/run.py) and appends its points to it.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import TYPE_CHECKING, Any
from uuid import uuid4

from bench.overhead import targets
from bench.overhead.bodies import chat_body
from bench.overhead.client import closed_loop, open_loop, percentile, post
from bench.overhead.measure import STREAM_CHUNKS, stream_summary

if TYPE_CHECKING:
    from bench.overhead.run import Bench, Target

DIRECT = "direct"
GOVERNED = "mindrouter-governed"
FAST = "mindrouter-governed-fast"
LITELLM = "litellm"
GOVERNED_2W = "mindrouter-governed-2w"
LITELLM_2W = "litellm-2w"
# The pairs of the workers rows: (one process, two workers, the rate they are compared at; None
# means the plan's fixed rate). LiteLLM is compared far below its one-core limit.
WORKER_PAIRS: tuple[tuple[str, str, int | None], ...] = (
    (GOVERNED, GOVERNED_2W, None),
    (LITELLM, LITELLM_2W, 10),
)
# The capacity sweep runs these at every concurrency; the other streaming targets at one.
CAPACITY_TARGETS = (DIRECT, GOVERNED)
PEER_CONCURRENCY = 32


async def mock_parity(bench: Bench) -> None:
    """Direct to the mock: a unary request and the same reply as a `[whole]` stream, in turn, at
    the fixed rate. Their latencies should be equal: that is what makes the gateway's collected
    stream comparable with the direct unary answer."""
    t = bench.targets[DIRECT]
    rate, duration = bench.plan.fixed_rate, bench.plan.parity_s
    bodies = {
        "unary": t.raw(chat_body()),
        "whole-stream": t.raw(chat_body(stream=True, whole=True)),
    }
    for round_ in range(1, bench.plan.rounds + 1):
        for kind, raw in bodies.items():
            results, _ = await open_loop(t.pool, raw, rate, duration, timeout=5.0)
            ok = [r.latency * 1000 for r in results if r.ok]
            point = {
                "scenario": "mock-parity",
                "target": DIRECT,
                "kind": kind,
                "round": round_,
                "rate": rate,
                "requests": len(results),
                "ok": len(ok),
                "bytes_p50": statistics.median(r.body_bytes for r in results),
                "p50_ms": percentile(ok, 50),
                "p99_ms": percentile(ok, 99),
            }
            bench.points.append(point)
            print(
                f"  mock parity {kind:<13} r{round_} p50 {point['p50_ms']:6.3f} "
                f"p99 {point['p99_ms']:6.3f} ms, {point['bytes_p50']:.0f} bytes",
                flush=True,
            )


async def stream_capacity(bench: Bench) -> None:
    """Closed-loop streams at each concurrency of the plan: direct and governed at all of them,
    the other gateways at one; CPU per relayed chunk from the process tree's utime + stime."""
    plan = bench.plan
    for conc in plan.stream_concurrency:
        for t in list(bench.targets.values()):
            if t.name not in bench.streaming:
                continue
            if t.name not in CAPACITY_TARGETS and conc != _peer_level(plan.stream_concurrency):
                continue
            raw = t.raw(chat_body(stream=True))
            seconds = plan.stream_step_s(conc)
            t.server.refresh_pids()
            with bench.alone(t):
                user0, sys0 = targets.user_system(t.server.pids)
                results, _ = await closed_loop(
                    t.pool, raw, conc, seconds, stream=True, timeout=4 * plan.timeout_s
                )
                user1, sys1 = targets.user_system(t.server.pids)
            cpu = (user1 - user0) + (sys1 - sys0)
            summary = stream_summary(results, STREAM_CHUNKS)
            point = {
                "scenario": "stream",
                "target": t.name,
                "concurrency": conc,
                "duration_s": seconds,
                **summary,
                "cpu_s": cpu,
                "system_share": (sys1 - sys0) / cpu if cpu > 0 else None,
                "cpu_us_per_chunk": cpu / max(1, summary["chunks_received"]) * 1e6,
                "loadavg_1m": os.getloadavg()[0],
            }
            bench.points.append(point)
            print(
                f"  stream c={conc:<4} {t.name:<26} ok {point['ok']:>5}/{point['streams']:<5}"
                f" ttft p99 {point['ttft_p99_ms']:7.2f} ms  gap p99 {point['gap_p99_ms']:6.2f} ms"
                f"  chunks min {point['chunks_received_min']:>3}"
                f"  cpu {point['cpu_us_per_chunk']:5.0f} µs/chunk",
                flush=True,
            )
            await bench.quiesce(t)


def _peer_level(levels: tuple[int, ...]) -> int:
    return PEER_CONCURRENCY if PEER_CONCURRENCY in levels else levels[0]


async def workers(bench: Bench) -> None:
    """One process against `--workers 2` at the same rate, interleaved, with each worker's CPU
    (its own process tree, from /proc) as its share of the work; and the one process at half
    the rate, what each of the two workers serves (CPU per request falls as a process's rate
    rises, so that is the like-for-like reference for a worker's cost). No direct baseline:
    these rows compare CPU and balance, not latency."""
    plan = bench.plan
    for round_ in range(1, plan.rounds + 1):
        for one, two, pair_rate in WORKER_PAIRS:
            if one not in bench.targets or two not in bench.targets:
                continue
            rate = pair_rate or plan.fixed_rate
            steps = [(one, "workers", rate), (two, "workers", rate)]
            if pair_rate is None:
                steps.append((one, "workers-half-rate", rate // 2))
            for name, scenario, r in steps:
                await _workers_step(bench, bench.targets[name], scenario, r, round_, name == two)


async def _workers_step(
    bench: Bench, t: Target, scenario: str, rate: int, round_: int, several: bool
) -> None:
    before = targets.children_cpu(t.server.proc.pid)
    # A new connection for every request: workers share connections by accepting them, so a
    # few keep-alive connections would say more about the client's pool than about the balance.
    headers = {**t.headers, "connection": "close"}
    raw = post(targets.HOST, t.port, t.chat_path, chat_body(), headers)
    p = await bench.unary_step(t, scenario, raw, rate, bench.plan.workers_s, round_)
    if several:
        p["worker_cpu_s"] = _worker_cpu(t, before)
        p["worker_shares"] = _shares(p["worker_cpu_s"], _count(t))
    print(
        f"  {scenario:<17} {t.name:<24} r{round_} {rate:>4} rps ok {p['ok']:>5}/"
        f"{p['requests']:<5} p50 {p['p50_ms']:7.2f} ms cpu {p['cpu_us_per_request']:6.0f} µs/req"
        + (f" shares {p['worker_shares']}" if several else ""),
        flush=True,
    )


def _count(t: Target) -> int:
    return int(t.server.info.get("workers", 1))


def _worker_cpu(t: Target, before: dict[int, float]) -> dict[str, float]:
    after = targets.children_cpu(t.server.proc.pid)
    return {str(pid): cpu - before.get(pid, 0.0) for pid, cpu in after.items()}


def _shares(cpu: dict[str, float], n: int) -> list[float]:
    """The `n` busiest children's shares of their summed CPU (a helper process such as
    multiprocessing's resource tracker is not a worker)."""
    busiest = sorted(cpu.values(), reverse=True)[:n]
    total = sum(busiest)
    return [round(c / total, 3) for c in busiest] if total > 0 else []


async def commit_probe(bench: Bench, when: str) -> None:
    """Single-row INSERT + COMMIT round trips on the benchmark's PostgreSQL, from this process,
    in a database of its own: the cost of one durable commit, which the durable audit target
    is stated against."""
    import asyncpg

    n = bench.plan.commit_probe_n
    db = "mrbench_commit_" + uuid4().hex[:12]
    try:
        await targets._pg_execute(f'CREATE DATABASE "{db}"')
    except Exception as exc:
        bench.notes.append(f"commit probe ({when}) skipped: {exc}")
        return
    try:
        conn = await asyncpg.connect(f"{targets.PG_DSN}/{db}", timeout=10)
        try:
            await conn.execute("CREATE TABLE probe (id bigserial PRIMARY KEY, v integer)")
            for i in range(20):  # connection warm-up, the statement's plan
                await conn.execute("INSERT INTO probe (v) VALUES ($1)", i)
            lat = []
            for i in range(n):
                t0 = time.perf_counter()
                await conn.execute("INSERT INTO probe (v) VALUES ($1)", i)
                lat.append((time.perf_counter() - t0) * 1000)
            setting = await conn.fetchval("SHOW synchronous_commit")
            fsync = await conn.fetchval("SHOW fsync")
        finally:
            await conn.close()
    finally:
        await targets._pg_execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
    point = {
        "scenario": "commit-probe",
        "target": "postgresql",
        "when": when,
        "commits": n,
        "synchronous_commit": setting,
        "fsync": fsync,
        "p50_ms": percentile(lat, 50),
        "p99_ms": percentile(lat, 99),
        "loadavg_1m": os.getloadavg()[0],
    }
    bench.points.append(point)
    print(
        f"  commit probe ({when}): {n} single-row commits, p50 {point['p50_ms']:.3f} ms "
        f"p99 {point['p99_ms']:.3f} ms (synchronous_commit {setting}, fsync {fsync})",
        flush=True,
    )


def summary(points: list[dict[str, Any]]) -> dict[str, Any]:
    """Figures of these scenarios, for figures.figures."""
    from bench.overhead import figures

    out: dict[str, Any] = {}
    parity = {
        kind: [p["p50_ms"] for p in points if p["scenario"] == "mock-parity" and p["kind"] == kind]
        for kind in ("unary", "whole-stream")
    }
    if all(parity.values()):
        out["mock_parity"] = {
            "unary_p50_ms": statistics.median(parity["unary"]),
            "whole_stream_p50_ms": statistics.median(parity["whole-stream"]),
        }
    commits = [p for p in points if p["scenario"] == "commit-probe"]
    if commits:
        out["commit_p50_ms"] = statistics.median(p["p50_ms"] for p in commits)
        out["commit_probes"] = [
            {k: p.get(k) for k in ("when", "p50_ms", "p99_ms", "synchronous_commit", "fsync")}
            for p in commits
        ]
    rows = {}
    for one, two, _ in WORKER_PAIRS:
        a = figures.select(points, "workers", one)
        b = figures.select(points, "workers", two)
        if not a or not b:
            continue
        shares = [s for p in b for s in p.get("worker_shares", [])]
        per_round = [p.get("worker_shares", []) for p in b]
        cpu_a, cpu_b = figures.cpu_per_ok(a), figures.cpu_per_ok(b)
        half = figures.select(points, "workers-half-rate", one)
        rows[two] = {
            "rate": b[0]["rate"],
            "one_process_cpu_us_per_request": cpu_a,
            "one_process_half_rate_cpu_us_per_request": figures.cpu_per_ok(half) if half else None,
            "workers_cpu_us_per_request": cpu_b,
            "cpu_ratio": cpu_b / cpu_a if cpu_a and cpu_b else None,
            "worker_shares_per_round": per_round,
            "worker_share_min": min(shares) if shares else None,
            "worker_share_max": max(shares) if shares else None,
            "error_rate": sum(p["errors"] for p in b) / max(1, sum(p["requests"] for p in b)),
        }
    if rows:
        out["workers"] = rows
    return out
