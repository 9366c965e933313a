"""Turns the benchmark's results into the target table, a JSON file and a Markdown file."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from bench.fairness.scenarios import FAIRNESS_SCENARIOS as FAIRNESS

POLICY_ORDER = ("ours", "fcfs", "round robin", "rate limit")
SAME_MIX = ("flood", "weights", "rejoin", "lone")  # every policy serves the same request mix


def _get(results: dict[str, Any], scenario: str, policy: str, key: str) -> float:
    value = results.get(scenario, {}).get("policies", {}).get(policy, {}).get(key)
    return float("nan") if value is None else float(value)


def targets(res: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per BENCHMARKS.md §2 target: our figure and whether it is met."""
    main, wide = res["scenarios"], res["wide"]
    rows: list[dict[str, Any]] = []

    def row(figure: str, target: str, value: float, ok: bool, note: str = "") -> None:
        rows.append({"figure": figure, "target": target, "ours": value, "met": ok, "note": note})

    ratio = min(
        _get(main, s, "ours", "tokens_per_s") / _get(main, s, "fcfs", "tokens_per_s")
        for s in SAME_MIX
    )
    row("throughput vs FCFS (worst of " + ", ".join(SAME_MIX) + ")", "≥ 98%", ratio, ratio >= 0.98)
    pvo = _get(main, "prompt vs output", "ours", "slot_busy")
    pvo /= _get(main, "prompt vs output", "fcfs", "slot_busy")
    row("slot busy vs FCFS, prompt vs output", "≥ 98%", pvo, pvo >= 0.98, "tokens/s differ by mix")
    util = _get(main, "lone", "ours", "utilisation")
    row("slot utilisation, one user alone", "≥ 98%", util, util >= 0.98)
    for label, src in (("2×2", main), ("2×8", wide)):
        p95 = max(_get(src, s, "ours", "share_error_p95") for s in FAIRNESS)
        mx = max(_get(src, s, "ours", "share_error_max") for s in FAIRNESS)
        jain = min(_get(src, s, "ours", "jain_min") for s in FAIRNESS)
        row(f"share error p95, 60 s windows ({label})", "≤ 5%", p95, p95 <= 0.05)
        row(f"share error max, 60 s windows ({label})", "≤ 10%", mx, mx <= 0.10)
        row(f"weighted Jain, worst window ({label})", "≥ 0.99", jain, jain >= 0.99)
    owed = _get(main, "flood", "ours", "light_excess_p99_ms_owed")
    strict = _get(main, "flood", "ours", "light_excess_p99_ms_strict")
    row("light-user excess delay p99, ms (owed slot)", "≤ 100", owed, owed <= 100)
    row("light-user excess delay p99, ms (strict next slot)", "≤ 100", strict, strict <= 100)
    small = _get(main, "two models", "ours", "small_excess_p99_ms")
    row("other model's excess delay p99, ms", "≤ 100", small, small <= 100)
    rejoin = _get(main, "rejoin", "ours", "rejoin_points")
    row("share in first minute after rejoining, points over fair", "≤ +5", rejoin, rejoin <= 5)
    dec = max(d["p99_ms"] for d in res["decision"].values())
    load = max(d["load_average_1m"] for d in res["decision"].values())
    note = f"wall clock; load average {load:.1f} on {res['cpus']} CPUs"
    row("decision time with 500 queued, p99 ms", "≤ 2", dec, dec <= 2.0, note)
    cpu = max(d["cpu_p99_ms"] for d in res["decision"].values())
    row("decision CPU time with 500 queued, p99 ms", "≤ 2", cpu, cpu <= 2.0, "thread CPU time")
    return rows


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "**no**"
    if isinstance(value, float):
        if math.isnan(value):
            return "–"
        return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


def markdown(res: dict[str, Any]) -> str:
    lines = [
        "# Fairness benchmark (simulated clock)",
        "",
        f"Mode: {res['mode']}; short run: {res['short']}. Testbed: {res['testbed']}.",
        "Produced by `python -m bench.fairness`; figures as defined in BENCHMARKS.md §2 and in",
        "`bench/fairness/metrics.py`. Ratios and errors are fractions (0.05 = 5%).",
        "",
        "## Targets",
        "",
        "| figure | target | ours | met | note |",
        "|---|---|---|---|---|",
    ]
    for r in res["targets"]:
        lines.append(
            f"| {r['figure']} | {r['target']} | {_fmt(r['ours'])} | {_fmt(r['met'])} "
            f"| {r['note']} |"
        )
    for title, key in (("2 backends × 2 slots", "scenarios"), ("2 backends × 8 slots", "wide")):
        lines += ["", f"## Scenarios on {title}", ""]
        for name, sc in res[key].items():
            policies = sc["policies"]
            keys = sorted({k for f in policies.values() for k in f})
            lines += [f"### {name}: {sc['what']} ({sc['duration']:g} s)", ""]
            lines.append(
                "| figure | " + " | ".join(p for p in POLICY_ORDER if p in policies) + " |"
            )
            lines.append("|---|" + "---|" * len(policies))
            for k in keys:
                cells = [
                    _fmt(policies[p].get(k, float("nan"))) for p in POLICY_ORDER if p in policies
                ]
                lines.append(f"| {k} | " + " | ".join(cells) + " |")
            lines.append("")
    lines += [
        "## Decision time (real code, 500 queued; medians over repeated runs)",
        "",
        "| shape | p50 ms | p99 ms | worst run's p99 ms | CPU-time p99 ms | load average |",
        "|---|---|---|---|---|---|",
    ]
    for shape, d in res["decision"].items():
        lines.append(
            f"| {shape} | {d['p50_ms']:.3f} | {d['p99_ms']:.3f} | {d['p99_ms_worst_run']:.3f} "
            f"| {d['cpu_p99_ms']:.3f} | {d['load_average_1m']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def _finite(value: Any) -> Any:
    """NaN (a figure that does not apply) becomes null, so the file is strict JSON."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def write(res: dict[str, Any], out_dir: Path) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / "fairness.json", out_dir / "fairness.md"
    json_path.write_text(json.dumps(_finite(res), indent=2, allow_nan=False) + "\n")
    md_path.write_text(markdown(res))
    return json_path, md_path
