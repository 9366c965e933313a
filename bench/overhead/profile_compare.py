"""`python -m bench.overhead.profile --compare a,b,...`: candidate changes side by side.

One gateway per variant (bench/overhead/variants.py), same profile, same mock, measured in turn at
the same open-loop rate, round after round: CPU per request from /proc, latency, and PostgreSQL
transactions per request.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import time
from pathlib import Path
from typing import Any

from bench.overhead import run, targets
from bench.overhead.client import Pool, open_loop
from bench.overhead.targets import HOST
from bench.overhead.variants import VARIANTS, launcher


async def compare(ns: argparse.Namespace) -> Path:
    """Each variant its own gateway (same profile, same mock), measured in turn, round by round."""
    with contextlib.suppress(OSError, AttributeError):
        os.sched_setaffinity(0, {int(targets.CLIENT_CORE)})
    names = [v.strip() for v in ns.compare.split(",") if v.strip()]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown variants {unknown}; known: {sorted(VARIANTS)}")
    workdir = targets.workdir()
    mock = await targets.start_mock(workdir)
    servers = [mock]
    rows: dict[str, list[dict[str, Any]]] = {v: [] for v in names}
    load: list[float] = []
    try:
        gws: dict[str, run.Target] = {}
        for v in names:
            gw = await targets.start_mindrouter(ns.profile, mock.port, workdir, launcher(v))
            servers.append(gw)
            gws[v] = run.Target(v, gw, gw.headers, Pool(HOST, gw.port))
        body = run.chat_body()
        for t in gws.values():
            await open_loop(t.pool, t.raw(body), 100, 3.0, timeout=30)
        # PostgreSQL publishes a backend's transaction counts when it goes idle, up to ~10 s
        # late: read them after a quiet spell at both ends, and take what the idle gateway does
        # meanwhile (the auth epoch poll) from an idle window of the same length.
        xact_a = await _pg_counts(gws)
        t_a = time.monotonic()
        if xact_a:
            await asyncio.sleep(PG_SETTLE_S)
        xact_b = await _pg_counts(gws)
        idle_rate = {
            v: (xact_b[v] - xact_a[v]) / (time.monotonic() - t_a) for v in xact_b if v in xact_a
        }
        t_b = time.monotonic()
        for round_ in range(1, ns.rounds + 1):
            for v, t in gws.items():
                t.server.refresh_pids()
                cpu0 = t.server.cpu()
                results, t0 = await open_loop(t.pool, t.raw(body), ns.rate, ns.duration)
                await asyncio.sleep(0.3)
                cpu = t.server.cpu() - cpu0
                row = run.unary_summary(results, t0, ns.rate)
                row["cpu_us_per_request"] = cpu / len(results) * 1e6
                row["round"] = round_
                rows[v].append(row)
                load.append(os.getloadavg()[0])
                print(
                    f"  r{round_} {v:<18} cpu {row['cpu_us_per_request']:6.0f} µs/req  "
                    f"p50 {row['p50_ms']:7.2f} p99 {row['p99_ms']:8.2f} ms  "
                    f"errors {row['errors']}",
                    flush=True,
                )
                await asyncio.sleep(1.0)
        if xact_b:
            await asyncio.sleep(PG_SETTLE_S)
        xact_c = await _pg_counts(gws)
        elapsed = time.monotonic() - t_b
        for v in names:
            if v in xact_c and v in xact_b:
                sent = sum(r["requests"] for r in rows[v])
                busy = xact_c[v] - xact_b[v] - idle_rate[v] * elapsed
                for r in rows[v]:
                    r["pg_xact_per_request"] = busy / sent
        for t in gws.values():
            t.pool.close()
    finally:
        await targets.stop_all(servers, workdir)
    path = run.RESULTS / f"overhead-variants-{ns.profile}.md"
    path.write_text(_compare_report(ns, names, rows, load))
    print(path.read_text())
    return path


PG_SETTLE_S = 12.0


def _fmt(value: float) -> str:
    return "–" if value != value else f"{value:.2f}"


async def _pg_counts(gws: dict[str, run.Target]) -> dict[str, int]:
    out = {}
    for v, t in gws.items():
        db = t.server.info.get("database_name")
        if db:
            out[v] = await targets.pg_transactions(db)
    return out


def _compare_report(
    ns: argparse.Namespace,
    names: list[str],
    rows: dict[str, list[dict[str, Any]]],
    load: list[float],
) -> str:
    def med(v: str, key: str) -> float:
        values = [
            r[key] for r in rows[v] if isinstance(r.get(key), int | float) and r[key] == r[key]
        ]
        return statistics.median(values) if values else float("nan")

    base = med(names[0], "cpu_us_per_request")
    lines = [
        f"# Candidate changes, MindRouter {ns.profile}, {ns.rate} RPS open loop",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {ns.rounds} rounds of "
        f"{ns.duration:g} s per variant, interleaved; load average (1 min) "
        f"{min(load):.2f}–{max(load):.2f}. Medians over rounds. Variants are defined in "
        "bench/overhead/variants.py.",
        "",
        f"| variant | CPU µs/request | vs {names[0]} | PG transactions/request | p50 ms | "
        "p99 ms | errors |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for v in names:
        cpu = med(v, "cpu_us_per_request")
        lines.append(
            f"| {v} | {cpu:.0f} | {(cpu - base) / base:+.1%} | "
            f"{_fmt(med(v, 'pg_xact_per_request'))} | {med(v, 'p50_ms'):.2f} | "
            f"{med(v, 'p99_ms'):.2f} | {sum(r['errors'] for r in rows[v])} |"
        )
    lines += ["", "Per round (CPU µs/request):", ""]
    for v in names:
        lines.append(f"- {v}: " + ", ".join(f"{r['cpu_us_per_request']:.0f}" for r in rows[v]))
    return "\n".join(lines) + "\n"
