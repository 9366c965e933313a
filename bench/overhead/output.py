"""The results of an overhead run: the JSON document, its figures, the files it is written to."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.overhead import figures, litellm_env, report, targets

if TYPE_CHECKING:
    from bench.overhead.run import Bench

RESULTS = Path(__file__).resolve().parents[1] / "results"


def results(
    bench: Bench,
    sustained: dict[str, dict[str, Any]],
    load_start: tuple[float, float, float],
    load_end: tuple[float, float, float],
) -> dict[str, Any]:
    data: dict[str, Any] = {
        "meta": {
            "mode": "short" if bench.plan.short else "full",
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(bench.started)),
            "duration_s": round(time.time() - bench.started, 1),
            "command": " ".join([".venv/bin/python", "-m", "bench.overhead", *sys.argv[1:]]),
            "cores": os.cpu_count(),
            "pinning": (
                "gateways and the floor: taskset -c 1; the --workers 2 rows: taskset -c 0,1 "
                "(both cores, so their workers share core 0 with the client and the mock); "
                "load client and mock: core 0"
            ),
            "mock": (
                "unary requests answered at once; the gateways' engine streams for them "
                "(marker [whole]) answered at once with the same reply in 64 chunks, no "
                "delay or gaps; client streams: 20 ms to the first chunk, 64 chunks 10 ms "
                "apart"
            ),
            "loadavg_start": load_start,
            "loadavg_end": load_end,
            "loadavg_1m_max": max((v for _, v in bench.load), default=load_end[0]),
            "loadavg_1m_samples": bench.load,
            "python": platform.python_version(),
            "mindrouter_commit": bench.commit,
            "litellm": litellm_env.LITELLM,
            "plan": bench.plan.__dict__,
            "skipped": bench.skipped,
            "sweep_decisions": sustained,
            "notes": bench.notes,
            "criteria": {
                "min_achieved_ratio": figures.MIN_ACHIEVED,
                "max_error_rate": figures.MAX_ERROR_RATE,
                "max_added_p99_ms": figures.MAX_ADDED_P99_MS,
            },
        },
        "targets": {
            n: {
                "port": t.port,
                **t.server.info,
                "idle": t.idle,
                "rss_peak_mib": max((m for _, m in t.rss_samples), default=None),
            }
            for n, t in bench.targets.items()
        },
        "points": bench.points,
    }
    data["figures"] = figures.figures(data)
    return data


def print_step(p: dict[str, Any]) -> None:
    print(
        f"  {p['scenario']:<12} {p['target']:<20} r{p['round']} {p['rate']:>5} rps: "
        f"ok {p['ok']:>6}/{p['requests']:<6} achieved {p.get('achieved_ratio', 0):6.3f}  "
        f"p50 {p['p50_ms']:8.2f} p99 {p['p99_ms']:8.2f} ms  "
        f"cpu {p['cpu_us_per_request']:7.0f} µs/req  load {p['loadavg_1m']:.1f}",
        flush=True,
    )


def slope(samples: list[tuple[float, float]]) -> float:
    xs = [x for x, _ in samples]
    ys = [y for _, y in samples]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in samples) / den if den else 0.0


def git_rev() -> str | None:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=targets.REPO,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def clean(value: Any) -> Any:
    """NaN is not JSON: null instead."""
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean(v) for v in value]
    return value


def write(data: dict[str, Any], stem: str) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{stem}.json").write_text(json.dumps(clean(data), indent=1) + "\n")
    (RESULTS / f"{stem}.md").write_text(report.markdown(clean(data)))
    print(f"wrote {RESULTS / stem}.json and .md", flush=True)


def rerender(path: Path) -> int:
    """Re-derives the figures and the report of a results file from its points."""
    data = json.loads(path.read_text())
    for name, f in data.get("figures", {}).items():
        peak = (f.get("memory") or {}).get("peak_mib")
        data["targets"].get(name, {}).setdefault("rss_peak_mib", peak)
    data["figures"] = figures.figures(data)
    write(data, path.stem)
    return 0
