"""`python -m bench.chaos.report RESULT.json...`: the soak's ledgers as a Markdown table."""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path
from statistics import median
from typing import Any


def _figures(values: list[float | None]) -> str:
    known = [v for v in values if v is not None]
    if not known:
        return "–"
    return f"{median(known):.1f} / {max(known):.1f}"


def _before_kill(r: dict[str, Any]) -> Any:
    if "generated_after_a_kill" not in r:
        return "–"
    return r["generated_output_tokens"] - r["recorded_output_tokens"] - r["generated_after_a_kill"]


def render(results: list[dict[str, Any]]) -> str:
    out = [
        "| seed | load (s) | requests | 200 | 429 | accepted w/o record | duplicates | pending "
        "| usage − records | delivered, not charged "
        "| generated − recorded output (after the kill / before it) "
        "| interrupted | limit excess "
        "| leases / reserved left | 5xx on killed replica | 5xx in Redis outage | 5xx other "
        "| violations |",
        "|" + "---|" * 18,
    ]
    for r in results:
        excess = sum(
            max(0, v["rpm_max"] - v["rpm_limit"])
            + max(0, v["concurrency_max"] - v["concurrency_limit"])
            + (max(0, v["budget_used"] - v["budget"]) if v["budget"] else 0)
            for v in r["limits"].values()
        )
        usage_diff = sum(abs(d) for d in r["usage_minus_records_by_user"].values())
        out.append(
            f"| {r['seed']} | {r['load_seconds']:.0f} | {r['requests']} "
            f"| {r['statuses'].get('200', 0)} | {r['statuses'].get('429', 0)} "
            f"| {r['accepted_without_record']} | {r['accepted_with_duplicate_records']} "
            f"| {r['pending_records']} | {usage_diff} | {r.get('delivered_not_charged', '–')} "
            f"| {r['generated_output_tokens'] - r['recorded_output_tokens']} "
            f"({r.get('generated_after_a_kill', '–')} / {_before_kill(r)}) "
            f"| {r['interrupted_records']} | {excess} "
            f"| {r['leases_held_after']} / {r['reserved_after']} "
            f"| {r['failures_on_killed_replica']} | {r['failures_in_redis_outage']} "
            f"| {r['failures_unexplained']} | {len(r['violations'])} |"
        )
    out += [
        "",
        "Faults and recoveries (median / max seconds over all runs):",
        "",
        "| fault | count | recovery | measured as |",
        "|---|---|---|---|",
    ]
    by_kind: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in results:
        for f in r["faults"]:
            by_kind[f["kind"]].append(f)
    meaning = {
        "SIGKILL replica": "kill → every pending record of the dead instance closed",
        "Redis killed, restarted empty": "kill → first request decided by the limits again",
        "PostgreSQL connections terminated": "terminate → first request decided again",
        "SIGTERM replica": "SIGTERM → drained and exited (status 0)",
        "backend 50% failing": "length of the window",
        "backend hanging": "length of the window",
    }
    for kind, faults in by_kind.items():
        out.append(
            f"| {kind} | {len(faults)} | {_figures([f['recovered_s'] for f in faults])} "
            f"| {meaning.get(kind, '')} |"
        )
        if kind == "SIGKILL replica":
            out.append(
                f"| … its slots (leases) | {len(faults)} "
                f"| {_figures([f['extra_s'] for f in faults])} "
                "| kill → every lease held at the kill gone from Redis |"
            )
    return "\n".join(out) + "\n"


def main() -> None:
    results = [json.loads(Path(p).read_text()) for p in sys.argv[1:]]
    print(render(sorted(results, key=lambda r: r["seed"])), end="")


if __name__ == "__main__":
    main()
