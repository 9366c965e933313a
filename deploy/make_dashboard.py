"""Writes deploy/grafana-dashboard.json: a sample Grafana dashboard over the gateway's /metrics.

    python deploy/make_dashboard.py

Generated rather than hand-edited so that every panel follows one layout and the queries stay
in one readable list; tests/test_dashboard.py checks that each metric a query names is one the
gateway exports. Import the JSON in Grafana (Dashboards → New → Import) and pick the Prometheus
data source that scrapes the gateway's `/metrics`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

OUT = Path(__file__).with_name("grafana-dashboard.json")
DS = {"type": "prometheus", "uid": "${datasource}"}

Query = tuple[str, str]  # (PromQL expression, legend)


def quantiles(metric: str, by: str = "", qs: tuple[float, ...] = (0.5, 0.99)) -> list[Query]:
    """p50/p99 (or `qs`) of a histogram, summed over every label but `by`."""
    group = f"le, {by}" if by else "le"
    prefix = f"{{{{{by}}}}} " if by else ""
    return [
        (
            f"histogram_quantile({q}, sum by ({group}) (rate({metric}_bucket[5m])))",
            f"{prefix}p{round(q * 100)}",
        )
        for q in qs
    ]


# (title, unit, queries); rows of two panels, in this order.
PANELS: list[tuple[str, str, list[Query]]] = [
    (
        "Requests per second by dialect and status",
        "reqps",
        [
            (
                "sum by (dialect, status) (rate(mindrouter_requests_total[1m]))",
                "{{dialect}} {{status}}",
            )
        ],
    ),
    (
        "Errors per second by kind",
        "reqps",
        [("sum by (kind) (rate(mindrouter_request_errors_total[1m]))", "{{kind}}")],
    ),
    ("Request latency", "s", quantiles("mindrouter_request_duration_seconds")),
    (
        "Time to first token by model",
        "s",
        quantiles("mindrouter_time_to_first_token_seconds", "model"),
    ),
    (
        "Tokens per second by model",
        "short",
        [
            (
                "sum by (model, direction) (rate(mindrouter_tokens_total[1m]))",
                "{{model}} {{direction}}",
            )
        ],
    ),
    (
        "Gateway overhead: time in the gateway before the first attempt",
        "s",
        quantiles("mindrouter_gateway_overhead_seconds"),
    ),
    ("Queue depth by model", "short", [("sum by (model) (mindrouter_queue_depth)", "{{model}}")]),
    ("Queue wait by model", "s", quantiles("mindrouter_queue_wait_seconds", "model", (0.99,))),
    (
        "Backends in flight",
        "short",
        [("sum by (backend) (mindrouter_backend_in_flight)", "{{backend}}")],
    ),
    (
        "Backend health (1 healthy) and circuit breaker (0 closed, 1 half-open, 2 open)",
        "short",
        [
            ("min by (backend) (mindrouter_backend_healthy)", "{{backend}} healthy"),
            ("max by (backend) (mindrouter_backend_breaker_state)", "{{backend}} breaker"),
            ("max by (backend) (mindrouter_backend_draining)", "{{backend}} draining"),
        ],
    ),
    (
        "Limits answered without Redis (fail_open)",
        "short",
        [("sum(rate(mindrouter_limits_degraded_total[5m]))", "degraded per second")],
    ),
]


def panel(i: int, title: str, unit: str, queries: list[Query]) -> dict[str, Any]:
    return {
        "id": i + 1,
        "type": "timeseries",
        "title": title,
        "datasource": DS,
        "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": 8 * (i // 2)},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
        "targets": [
            {"refId": chr(ord("A") + k), "datasource": DS, "expr": expr, "legendFormat": legend}
            for k, (expr, legend) in enumerate(queries)
        ],
    }


def dashboard() -> dict[str, Any]:
    return {
        "title": "MindRouter",
        "uid": "mindrouter-gateway",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "time": {"from": "now-1h", "to": "now"},
        "refresh": "30s",
        "tags": ["mindrouter", "llm", "gateway"],
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "type": "datasource",
                    "query": "prometheus",
                    "label": "Prometheus",
                }
            ]
        },
        "panels": [panel(i, *p) for i, p in enumerate(PANELS)],
    }


def main() -> None:
    OUT.write_text(json.dumps(dashboard(), indent=2) + "\n")
    print(OUT)


if __name__ == "__main__":
    main()
