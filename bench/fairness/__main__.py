"""`python -m bench.fairness [--short] [--out DIR]`: runs the simulated-clock fairness benchmark
and writes fairness.json and fairness.md (default: bench/results/)."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path
from typing import Any

from bench.fairness import report
from bench.fairness.decision import decision_times
from bench.fairness.metrics import percentile
from bench.fairness.scenarios import (
    FAIRNESS_SCENARIOS,
    TESTBEDS,
    Scenario,
    granularity,
    run,
    scenarios,
)

RESULTS = Path(__file__).resolve().parent.parent / "results"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fairness", description=__doc__)
    parser.add_argument("--short", action="store_true", help="half-length scenarios, fewer samples")
    parser.add_argument("--out", type=Path, default=RESULTS, help="directory for the results")
    parser.add_argument(
        "--seeds", type=int, help="traces per scenario, figures are medians (default 5, short 2)"
    )
    args = parser.parse_args(argv)
    seeds = args.seeds or (2 if args.short else 5)
    if seeds < 1:
        parser.error("--seeds must be at least 1")

    res: dict[str, Any] = {
        "mode": "simulated clock",
        "short": args.short,
        "seeds": seeds,
        "testbed": "2 backends × 2 slots, 40 output tokens/s and 800 prompt tokens/s per slot",
        "cpus": os.cpu_count(),
        "scenarios": {},
        "testbeds": {t.key: {"title": t.title, "scenarios": {}} for t in TESTBEDS},
        "decision": {},
    }

    def entry(sc: Scenario, what: str) -> dict[str, Any]:
        return {"what": what, "duration": sc.duration, "policies": run(sc, seeds)}

    for sc in scenarios(args.short):
        res["scenarios"][sc.name] = entry(sc, sc.what)
        if sc.name in FAIRNESS_SCENARIOS:
            for bed in TESTBEDS:
                other = bed.make(sc)
                res["testbeds"][bed.key]["scenarios"][sc.name] = entry(
                    other, f"{sc.what} {bed.change}"
                )
        if sc.name == "weights":
            res["granularity"] = granularity(sc, seeds)
    # The machine is shared and noisy: the figure is the median over repeated runs.
    repeats, samples = (3, 1000) if args.short else (7, 2000)
    for shape, users in (("500 users × 1 job", 500), ("50 users × 10 jobs", 50)):
        runs = [decision_times(users, samples, seed=7 + i) for i in range(repeats)]
        p99s = [1000 * percentile(wall, 99) for wall, _ in runs]
        res["decision"][shape] = {
            "repeats": repeats,
            "samples": samples,
            "p50_ms": statistics.median(1000 * statistics.median(wall) for wall, _ in runs),
            "p99_ms": statistics.median(p99s),
            "p99_ms_worst_run": max(p99s),
            "cpu_p99_ms": statistics.median(1000 * percentile(cpu, 99) for _, cpu in runs),
            "load_average_1m": os.getloadavg()[0],
        }
    res["targets"] = report.targets(res)
    json_path, md_path = report.write(res, args.out)
    for r in res["targets"]:
        mark = {"yes": "ok ", "no": "NO "}.get(r["verdict"], r["verdict"])
        ref = (
            f", clairvoyant {r['clairvoyant']:.4g}" if r["clairvoyant"] == r["clairvoyant"] else ""
        )
        print(f"{mark} {r['figure']}: {r['ours']:.4g}{ref} (target {r['target']})")
    print(f"wrote {json_path} and {md_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
