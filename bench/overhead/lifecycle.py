"""The end of a stream and a long run: streams the client abandons, and the soak."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import orjson

from bench.overhead.bodies import chat_body
from bench.overhead.client import get, open_loop, percentile, post_once
from bench.overhead.output import print_step, slope
from bench.overhead.targets import HOST

if TYPE_CHECKING:
    from bench.overhead.run import Bench, Target


async def disconnect(bench: Bench) -> None:
    """Streams cancelled by the client after 5 chunks: how long until the backend sees it,
    and (MindRouter) whether the partial usage was charged and the slot given back."""
    n = bench.plan.disconnect
    assert bench.mock is not None
    for t in bench.active():
        await post_once(HOST, bench.mock.port, "/_reset", b"{}")
        before = await _usage(bench, t)
        prefix = t.name.replace("-", "")

        def body(i: int, t: Target = t, prefix: str = prefix) -> bytes:
            return t.raw(chat_body(stream=True, content=f"Count slowly. [tag:{prefix}{i}]"))

        with bench.alone(t):
            results, _ = await open_loop(
                t.pool, body, 25, n / 25, stream=True, cancel_after=5, timeout=15
            )
            await asyncio.sleep(2.0)
        stats = orjson.loads(await get(HOST, bench.mock.port, "/_stats"))
        after = await _usage(bench, t)
        closed = stats["closed_early"]
        delays = []
        unseen = 0
        for i, r in enumerate(results):
            seen = closed.get(f"{prefix}{i}")
            if r.cancelled_at is None:
                continue
            if seen is None:
                unseen += 1
            else:
                delays.append((seen - r.cancelled_at) * 1000)
        cancelled = sum(1 for r in results if r.cancelled_at is not None)
        point: dict[str, Any] = {
            "scenario": "disconnect",
            "target": t.name,
            "streams": len(results),
            "cancelled": cancelled,
            "backend_saw_close": len(delays),
            "backend_never_saw_close": unseen,
            "close_delay_p50_ms": percentile(delays, 50),
            "close_delay_p99_ms": percentile(delays, 99),
            "close_delay_max_ms": max(delays) if delays else float("nan"),
        }
        if before is not None and after is not None:
            charged = after["period_tokens"] - before["period_tokens"]
            point["tokens_charged_per_cancelled_stream"] = charged / max(1, cancelled)
            point["in_flight_after"] = after.get("in_flight")
            point["reserved_tokens_after"] = after.get("reserved_tokens")
        bench.points.append(point)
        print(
            f"  disconnect {t.name:<20} cancelled {cancelled:>4} backend saw "
            f"{len(delays):>4} p50 {point['close_delay_p50_ms']:7.2f} ms "
            f"p99 {point['close_delay_p99_ms']:7.2f} ms"
            + (
                f"  charged/stream {point['tokens_charged_per_cancelled_stream']:.1f}"
                f" in_flight {point['in_flight_after']}"
                if "in_flight_after" in point
                else ""
            ),
            flush=True,
        )
        await bench.quiesce(t)


async def _usage(bench: Bench, t: Target) -> dict[str, Any] | None:
    if not t.name.startswith("mindrouter"):
        return None
    try:
        data = orjson.loads(await get(HOST, t.port, "/v1/usage", t.headers))
    except Exception as exc:
        bench.notes.append(f"{t.name}: /v1/usage failed: {exc}")
        return None
    return data if isinstance(data, dict) else None


async def soak(bench: Bench, sustained: dict[str, dict[str, Any]], names: tuple[str, ...]) -> None:
    """Half the sustained rate (at most 400 RPS) for a while: does the RSS grow?"""
    for t in bench.targets.values():
        if t.name not in names:
            continue
        best = sustained.get(t.name, {}).get("max_sustained_rps") or 100
        rate = max(25, min(400, best // 2))
        raw = t.raw(chat_body())
        start = len(t.rss_samples)
        t0 = time.monotonic()
        p = await bench.unary_step(t, "soak", raw, rate, bench.plan.soak_s, 1)
        samples = [(s - t0, m) for s, m in t.rss_samples[start:] if s - t0 >= 10]
        p["rss_slope_mib_per_min"] = slope(samples) * 60 if len(samples) > 4 else None
        p["rss_start_mib"] = samples[0][1] if samples else None
        p["rss_end_mib"] = samples[-1][1] if samples else None
        print_step(p)
        print(
            f"    RSS {p['rss_start_mib']} -> {p['rss_end_mib']} MiB, slope "
            f"{p['rss_slope_mib_per_min']} MiB/min",
            flush=True,
        )
