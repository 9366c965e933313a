"""The figures of an overhead run, derived from its points alone.

Pure functions of the JSON the run writes, so that a report can be re-derived from a results
file (`python -m bench.overhead --rerender FILE`) and the run's own decisions (when a gateway
stops sustaining a rate) use the same rules as the report.
"""

from __future__ import annotations

import statistics
from typing import Any

DIRECT = "direct"
GATEWAYS = (
    "mindrouter-bare",
    "floor",
    "mindrouter-governed",
    "mindrouter-governed-fast",
    "litellm",
    "mindrouter-governed-2w",
    "litellm-2w",
)
RUN = "run"  # the figures that belong to no one gateway (bench/overhead/scenarios.py)

# The criteria for a sustained rate.
MIN_ACHIEVED = 0.99
MAX_ERROR_RATE = 0.001
MAX_ADDED_P99_MS = 25.0
# The criteria for a stream concurrency one core relays: over direct at the same concurrency.
MAX_ADDED_GAP_P99_MS = 2.0
MAX_ADDED_TTFT_P99_MS = 10.0

Point = dict[str, Any]


def _num(value: Any) -> bool:
    return isinstance(value, int | float) and value == value


def select(points: list[Point], scenario: str, target: str, **match: Any) -> list[Point]:
    return [
        p
        for p in points
        if p["scenario"] == scenario
        and p["target"] == target
        and all(p.get(k) == v for k, v in match.items())
    ]


def first(points: list[Point], scenario: str, target: str, **match: Any) -> Point | None:
    found = select(points, scenario, target, **match)
    return found[0] if found else None


def cpu_per_ok(points: list[Point]) -> float | None:
    """CPU µs per successful request: a saturated gateway spends CPU on requests that then time
    out at the client, which per request *sent* would hide."""
    cpu = sum(p["cpu_s"] for p in points)
    ok = sum(p["ok"] for p in points)
    return cpu / ok * 1e6 if ok else None


def added(points: list[Point], scenario: str, target: str, rate: int) -> dict[str, Any] | None:
    """Gateway minus direct at the same offered rate, per round, then the median over rounds."""
    mine = select(points, scenario, target, rate=rate)
    if not mine:
        return None
    p50: list[float] = []
    p99: list[float] = []
    for p in mine:
        base = first(points, scenario, DIRECT, rate=rate, round=p["round"])
        if base is None or not _num(p["p50_ms"]) or not _num(base["p50_ms"]):
            continue
        p50.append(p["p50_ms"] - base["p50_ms"])
        p99.append(p["p99_ms"] - base["p99_ms"])
    requests = sum(p["requests"] for p in mine)
    return {
        "added_p50_ms": statistics.median(p50) if p50 else None,
        "added_p99_ms": statistics.median(p99) if p99 else None,
        "error_rate": sum(p["errors"] for p in mine) / requests if requests else None,
        "achieved_ratio": statistics.median(p.get("achieved_ratio") or 0.0 for p in mine),
        "cpu_us_per_request": cpu_per_ok(mine),
        "rounds": len(mine),
    }


def sustained_at(points: list[Point], target: str, rate: int) -> bool:
    a = added(points, "sweep", target, rate)
    return (
        a is not None
        and a["added_p99_ms"] is not None
        and a["achieved_ratio"] >= MIN_ACHIEVED
        and (a["error_rate"] or 0.0) < MAX_ERROR_RATE
        and a["added_p99_ms"] <= MAX_ADDED_P99_MS
    )


def max_sustained(points: list[Point], target: str) -> tuple[int | None, int | None]:
    """(highest rate sustained with every lower rate sustained too, lowest rate that failed)."""
    rates = sorted({p["rate"] for p in select(points, "sweep", target)})
    best: int | None = None
    for rate in rates:
        if not sustained_at(points, target, rate):
            return best, rate
        best = rate
    return best, None


def stream_held(s: Point, d: Point) -> bool:
    """A stream concurrency relayed within the criteria (`s` the gateway's point, `d` direct's)."""
    if not all(_num(x) for x in (s["gap_p99_ms"], d["gap_p99_ms"], s["ttft_p99_ms"])):
        return False
    return bool(
        s["gap_p99_ms"] - d["gap_p99_ms"] <= MAX_ADDED_GAP_P99_MS
        and s["ttft_p99_ms"] - d["ttft_p99_ms"] <= MAX_ADDED_TTFT_P99_MS
        and s["error_rate"] <= MAX_ERROR_RATE
        and s["coalesced_streams"] == 0
    )


def stream_capacity(points: list[Point], target: str) -> dict[str, Any] | None:
    """The highest concurrency held with every lower one held too, and the first that failed."""
    levels = sorted({p["concurrency"] for p in select(points, "stream", target)})
    if len(levels) < 2:
        return None
    best: int | None = None
    failed: int | None = None
    for conc in levels:
        s = first(points, "stream", target, concurrency=conc)
        d = first(points, "stream", DIRECT, concurrency=conc)
        if s is None or d is None or not stream_held(s, d):
            failed = conc
            break
        best = conc
    at = first(points, "stream", target, concurrency=best) if best else None
    return {
        "max_streams": best,
        "first_failing_streams": failed,
        "levels": levels,
        "cpu_us_per_chunk_at_max": at["cpu_us_per_chunk"] if at else None,
        "cpu_us_per_chunk": {
            str(p["concurrency"]): p.get("cpu_us_per_chunk")
            for p in select(points, "stream", target)
        },
    }


def figures(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    from bench.overhead import scenarios

    points: list[Point] = data["points"]
    plan = data["meta"]["plan"]
    rate = plan.get("fixed_rate", 200)
    out: dict[str, dict[str, Any]] = {RUN: scenarios.summary(points)}
    for name in GATEWAYS:
        if name not in data["targets"]:
            continue
        t = data["targets"][name]
        f: dict[str, Any] = {}
        a = added(points, "sweep", name, rate)
        if a is not None:
            f[f"added_p50_ms_at_{rate}"] = a["added_p50_ms"]
            f[f"added_p99_ms_at_{rate}"] = a["added_p99_ms"]
            f[f"error_rate_at_{rate}"] = a["error_rate"]
            f[f"achieved_ratio_at_{rate}"] = a["achieved_ratio"]
            f["cpu_us_per_request"] = a["cpu_us_per_request"]
        lowest = min((p["rate"] for p in select(points, "sweep", name)), default=None)
        if lowest is not None:
            f["cpu_us_per_request_at_lowest_rate"] = cpu_per_ok(
                select(points, "sweep", name, rate=lowest)
            )
            f["lowest_rate"] = lowest
        best, failed = max_sustained(points, name)
        f["max_sustained_rps"] = best
        f["first_failing_rps"] = failed
        # The floor stops at the fixed rate: what it held there is a lower bound.
        f["sweep_stopped_at_fixed_rate"] = name == "floor" and failed is None
        below = [p for p in select(points, "sweep", name) if best and p["rate"] <= best]
        if below:
            f["error_rate_up_to_sustained"] = sum(p["errors"] for p in below) / sum(
                p["requests"] for p in below
            )
        for conc in plan["stream_concurrency"]:
            s = first(points, "stream", name, concurrency=conc)
            d = first(points, "stream", DIRECT, concurrency=conc)
            if s and d and _num(s["ttft_p50_ms"]) and _num(d["ttft_p50_ms"]):
                f[f"stream_c{conc}"] = {
                    "added_ttft_p50_ms": s["ttft_p50_ms"] - d["ttft_p50_ms"],
                    "added_ttft_p99_ms": s["ttft_p99_ms"] - d["ttft_p99_ms"],
                    "coalesced_streams": s["coalesced_streams"],
                    "ok_streams": s["ok"],
                    "chunks_received_min": s["chunks_received_min"],
                    "gap_p99_ms": s["gap_p99_ms"],
                    "direct_gap_p99_ms": d["gap_p99_ms"],
                    "added_gap_p99_ms": s["gap_p99_ms"] - d["gap_p99_ms"]
                    if _num(s["gap_p99_ms"]) and _num(d["gap_p99_ms"])
                    else None,
                    "error_rate": s["error_rate"],
                    "cpu_us_per_chunk": s.get("cpu_us_per_chunk"),
                    "held": stream_held(s, d),
                }
        cap = stream_capacity(points, name)
        if cap is not None:
            f["stream_capacity"] = cap
        soak = first(points, "soak", name)
        f["memory"] = {
            "idle_mib": t.get("idle", {}).get("rss_mib"),
            "peak_mib": t.get("rss_peak_mib"),
            "soak_slope_mib_per_min": soak.get("rss_slope_mib_per_min") if soak else None,
        }
        f["idle_cpu_pct"] = t.get("idle", {}).get("cpu_pct")
        for scenario in ("large-prompt", "anthropic"):
            g = first(points, scenario, name)
            d = first(points, scenario, DIRECT)
            if g and d and _num(g["p50_ms"]) and _num(d["p50_ms"]):
                f[scenario] = {
                    "added_p50_ms": g["p50_ms"] - d["p50_ms"],
                    "added_p99_ms": g["p99_ms"] - d["p99_ms"],
                    "cpu_us_per_request": cpu_per_ok([g]),
                    "error_rate": g["error_rate"],
                }
        dis = first(points, "disconnect", name)
        if dis:
            f["disconnect"] = {k: v for k, v in dis.items() if k not in ("scenario", "target")}
        out[name] = f
    return out
